// Package preempt holds the decisions of being told to stop, for the
// workers and for the launcher, as pure state machines: events in (a
// signal, a step boundary's agreement, a worker's exit, the time),
// decisions out. The signal handling and the collectives are at the edge
// (optim/preempt for the workers, internal/launch for gohorovodrun).
//
// A scheduler that is about to take a job's machines tells it first:
// SLURM sends SIGTERM (and, with --signal=USR1@90, SIGUSR1 ahead of
// time), Kubernetes sends SIGTERM and waits for the pod's grace period,
// torchrun passes SIGTERM on to its workers, a user presses Ctrl-C
// (SIGINT). A Worker machine turns the first such signal into a request
// that every rank agrees on at the next step boundary, so that all ranks
// stop after the same step, checkpoint, and exit with ExitStatus; a
// second signal (more than Echo after the first: SLURM signals the
// launcher and the workers, and the launcher passes it on), or the grace
// period running out, ends the process at once. A Launch machine decides what gohorovodrun does: forward the
// first signal to the workers and wait for them, stop them at once on a
// second signal or when the grace period runs out, and report the job as
// preempted when its workers exited with ExitStatus.
package preempt
