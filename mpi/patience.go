package mpi

import "time"

// Patience is how a patient collective (Comm.AllreducePatient) waits for
// the other ranks: it tests the nonblocking collective without pause for
// Spin, then sleeps between tests, First at first, each sleep twice the
// last, up to Max. A blocking MPI collective instead spins (or yields) in
// the library until the last rank arrives, taking a core that a rank still
// computing could use; sleeping gives it back, at the cost of noticing the
// completion up to one sleep late.
type Patience struct {
	Spin  time.Duration // testing without pause, from the start
	First time.Duration // the first sleep
	Max   time.Duration // the longest sleep
}

// DefaultSpin is how long the runtime's patient waits test without pause.
// A small allreduce whose ranks arrive together completes within this
// through MPI_Iallreduce on one machine, so a shorter spin sends a rank to
// sleep just before its peer's data lands, and the sleeps' granularity is
// then added to every agreement (docs/BENCHMARKS.md compares spins).
const DefaultSpin = 200 * time.Microsecond

// DefaultPatience is the runtime's schedule for the per-cycle agreement
// with the knob's longest sleep max.
func DefaultPatience(max time.Duration) Patience {
	return Patience{Spin: DefaultSpin, First: 10 * time.Microsecond, Max: max}
}

// waiter is one wait's state under a Patience: a pure schedule, told the
// time waited so far, so that tests can run it without a clock.
type waiter struct {
	p     Patience
	sleep time.Duration // the last sleep (0: none yet)
}

// next returns how long to sleep before the next test, having waited
// waited since the collective started: 0 (test again at once) while
// within the spin, then First, doubling up to Max.
func (w *waiter) next(waited time.Duration) time.Duration {
	if waited < w.p.Spin || w.p.Max <= 0 {
		return 0
	}
	switch {
	case w.sleep == 0:
		w.sleep = max(w.p.First, time.Microsecond)
	default:
		w.sleep *= 2
	}
	w.sleep = min(w.sleep, w.p.Max)
	return w.sleep
}
