// Package elastic is the launcher's elastic driver as a pure state machine:
// Horovod's runner/elastic driver (discovery, host assignment, blacklist,
// worker registry and reset accounting) with no I/O, no clock and no
// goroutines.
//
// The caller feeds a Driver events with the time they happened, through
// Step: the host discovery script's result (Discovered, parsed by
// ParseDiscovery, or DiscoveryFailed), worker reports (Ready when a running
// worker resets and asks to join the next round, Succeeded and Failed when
// its process exits) and Tick, about once a second, so that deadlines and
// blacklist cooldowns are noticed. Each Step returns a Decision: the
// membership of a new rendezvous round in rank order, the workers to start
// and to stop, a host update to send to the coordinator (rank 0), and
// whether the job has ended and why. One small loop in the launcher does the
// I/O; the tests script events and times, without sleeps.
//
// The rules are those of Horovod's elastic driver (horovodrun --min-np):
//   - The job starts when -np slots are available; a reset waits until
//     --min-np slots are available; either wait ends in an error after the
//     elastic timeout. At most --max-np slots are assigned, host by host.
//   - Host order is stable: hosts keep their relative order, new (and
//     re-admitted) hosts are appended, so the oldest workers keep the
//     lowest ranks and rank 0 always holds up-to-date state.
//   - When the hosts change so that the assignment would change, the
//     coordinator is told once per round; the workers reset at their next
//     commit and report Ready.
//   - When every assigned slot has reported (Ready, Succeeded or Failed) the
//     round ends: any success ends the job; all failures end it; each
//     failure blacklists its whole host (permanently, or for a cooldown of
//     clamp(MIN*2^count + U*MIN, MIN, MAX), see Cooldown); a job whose hosts
//     are all blacklisted ends; a job that has reset --reset-limit times
//     ends with Horovod's message; otherwise the reset count grows and a
//     new round begins, which must keep at least one host of the last one.
//   - The first discovery failure ends the job with the script's exit
//     status; later ones are tolerated for up to the elastic timeout.
//
// internal/launch's elastic run (elastic_run.go) is that loop: it runs the
// discovery script, serves rank requests from the round's membership,
// starts and stops workers, and maps horovodrun's elastic flags onto
// Config.
package elastic
