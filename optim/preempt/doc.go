// Package preempt makes a training loop stop cleanly when it is told to:
// SIGTERM (SLURM, Kubernetes, torchrun and gohorovodrun send it before they
// kill a job), SIGUSR1 (SLURM's --signal=USR1@SECONDS, and what
// gohorovodrun forwards through mpirun) and SIGINT (Ctrl-C).
//
// A Watcher catches those signals. The training loop calls Check at every
// step boundary, on every rank: Check is a collective (one allreduce of a
// single number) in which the ranks agree whether any of them was told to
// stop, so that all of them stop after the same step, even when only one
// rank got the signal. When they stop, Check calls the checkpoint hook
// given to it, waits until every rank's hook has returned (so that no rank
// exits, and makes mpirun abort the others, while rank 0 still writes),
// and returns ErrPreempted; the program then shuts the runtime down and
// exits with ExitStatus (99), which gohorovodrun passes on as its own. A
// second signal (a signal within a second of the first is the same one
// delivered twice: SLURM signals every process, gohorovodrun passes it
// on), or the grace period (Options.Grace, 25 s by default)
// running out before the stop is done, ends the process at once with
// status 128+N, N being the signal's number.
//
//	w, err := preempt.Watch(coll, preempt.Options{})
//	defer w.Close()
//	for step := start; step < steps; step++ {
//		train(step)
//		if err := w.Check(func() error { return save(step) }); err != nil {
//			return err // ErrPreempted: exit with preempt.ExitCode(err)
//		}
//	}
//
// The decisions are the pure machine of internal/preempt; this package is
// its edge: the signal handlers, the clock, the collectives.
package preempt
