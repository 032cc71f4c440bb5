package preempt

import "time"

// Action is what the launcher does next.
type Action int

const (
	// Wait: nothing to do.
	Wait Action = iota
	// Forward: pass the stop on to every worker.
	Forward
	// StopNow: stop every worker at once (SIGTERM, then SIGKILL).
	StopNow
)

func (a Action) String() string {
	switch a {
	case Wait:
		return "wait"
	case Forward:
		return "forward"
	case StopNow:
		return "stop now"
	}
	return "unknown"
}

// Launch is the launcher's state for one job.
type Launch struct {
	// Grace is how long the workers have, from the first signal to the
	// launcher (or the first worker's exit with ExitStatus), to end by
	// themselves; 0: DefaultGrace plus 5 s.
	Grace time.Duration

	signals   int
	first     time.Time // of the first signal
	since     time.Time
	preempted int // workers that exited with ExitStatus
	others    int // workers that exited otherwise (0 included)
	failed    int // of which with a status other than 0
}

func (l *Launch) grace() time.Duration {
	if l.Grace > 0 {
		return l.Grace
	}
	return DefaultGrace + 5*time.Second
}

// Signal records a signal to the launcher at now: the first is
// forwarded; another within Echo of it is the same request delivered
// twice (SLURM signals the batch script's process group and every process
// of the job); a later one stops the job at once.
func (l *Launch) Signal(now time.Time) Action {
	if l.signals > 0 && now.Sub(l.first) < Echo {
		return Wait
	}
	l.signals++
	if l.signals == 1 {
		l.first = now
		l.start(now)
		return Forward
	}
	return StopNow
}

func (l *Launch) start(now time.Time) {
	if l.since.IsZero() {
		l.since = now
	}
}

// Exited records a worker's exit status at now (128+N for a worker
// killed by signal N). A worker that exited with ExitStatus is not a
// failure: the others are given the grace period to follow (they agreed
// on the same step).
func (l *Launch) Exited(status int, now time.Time) {
	switch {
	case status == ExitStatus:
		l.preempted++
		l.start(now)
	case status != 0:
		l.failed++
		l.others++
	default:
		l.others++
	}
}

// Signaled reports whether the launcher itself was told to stop.
func (l *Launch) Signaled() bool { return l.signals > 0 }

// Preempting reports whether the job is being stopped by preemption: a
// signal was received, or a worker exited with ExitStatus. A worker's
// exit with another status is then no failure of its own.
func (l *Launch) Preempting() bool { return !l.since.IsZero() }

// Deadline is when the grace period ends; ok is false when the job is
// not being preempted.
func (l *Launch) Deadline() (t time.Time, ok bool) {
	if l.since.IsZero() {
		return time.Time{}, false
	}
	return l.since.Add(l.grace()), true
}

// Tick returns StopNow once the grace period has run out at now.
func (l *Launch) Tick(now time.Time) Action {
	if d, ok := l.Deadline(); ok && !now.Before(d) {
		return StopNow
	}
	return Wait
}

// Failed is the number of workers that exited with a status other than 0
// and ExitStatus.
func (l *Launch) Failed() int { return l.failed }

// Preempted reports whether the job, once every worker has exited, ended
// by preemption: some worker exited with ExitStatus and none failed
// otherwise.
func (l *Launch) Preempted() bool { return l.preempted > 0 && l.failed == 0 }
