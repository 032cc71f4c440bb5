package preempt

import "time"

// ExitStatus is the exit status of a worker that stopped because it was
// told to, at a step boundary, after its checkpoint; gohorovodrun exits
// with it when its job was preempted. It is distinct from a failure's 1,
// from the 75 of a rank that ends itself because another one froze
// (runtime's heartbeat), from the codes of sysexits.h and from the 128+N
// of a process killed by signal N.
const ExitStatus = 99

// EnvListeners names the directory in which each worker that stops at
// step boundaries when told to (optim/preempt's Watcher) keeps a file named
// by its pid while it watches. gohorovodrun makes the directory and sets
// the variable for its workers; on a stop signal it passes the signal on
// and waits only when a worker listens there, and otherwise stops the job
// at once, as for a program that does not checkpoint.
const EnvListeners = "GOHOROVOD_PREEMPT_DIR"

// DefaultGrace is how long a worker has, from the first signal, to reach
// the next step boundary, agree, checkpoint and exit: under Kubernetes'
// default termination grace period of 30 s.
const DefaultGrace = 25 * time.Second

// Decision is what a worker does next.
type Decision int

const (
	// Continue: train on.
	Continue Decision = iota
	// Stop: every rank stops after this step: checkpoint, then exit with
	// ExitStatus.
	Stop
	// Exit: end the process now (a second signal, or the grace period
	// ran out).
	Exit
)

func (d Decision) String() string {
	switch d {
	case Continue:
		return "continue"
	case Stop:
		return "stop"
	case Exit:
		return "exit"
	}
	return "unknown"
}

// Worker is one rank's state. Its zero value with a Grace is ready.
type Worker struct {
	// Grace is the time from the first signal to Exit; 0: DefaultGrace.
	Grace time.Duration

	signals int
	first   time.Time
	stopped bool
}

// Echo is how soon after the first signal another one counts as the same
// request delivered twice, not as a second request: SLURM signals every
// process of a job, the launcher among them, and the launcher passes the
// signal on.
const Echo = time.Second

// Signal records a signal received at now: the first asks for a stop
// (Continue until the ranks agree); another within Echo of it is the same
// request (Continue); a later one is Exit.
func (w *Worker) Signal(now time.Time) Decision {
	if w.signals > 0 && now.Sub(w.first) < Echo {
		return Continue
	}
	w.signals++
	if w.signals == 1 {
		w.first = now
		return Continue
	}
	return Exit
}

// Requested reports whether this rank was told to stop: what it
// contributes to the agreement at the next step boundary.
func (w *Worker) Requested() bool { return w.signals > 0 }

// Boundary takes the agreement of a step boundary (any: some rank was
// told to stop) and returns Stop or Continue, the same on every rank.
func (w *Worker) Boundary(any bool) Decision {
	if any {
		w.stopped = true
		return Stop
	}
	return Continue
}

// Stopping reports whether the ranks agreed to stop.
func (w *Worker) Stopping() bool { return w.stopped }

// Deadline is when the grace period of the first signal ends; ok is false
// before any signal.
func (w *Worker) Deadline() (t time.Time, ok bool) {
	if w.signals == 0 {
		return time.Time{}, false
	}
	g := w.Grace
	if g <= 0 {
		g = DefaultGrace
	}
	return w.first.Add(g), true
}

// Tick returns Exit once the grace period has run out at now, else
// Continue.
func (w *Worker) Tick(now time.Time) Decision {
	if d, ok := w.Deadline(); ok && !now.Before(d) {
		return Exit
	}
	return Continue
}
