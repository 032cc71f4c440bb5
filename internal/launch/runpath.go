package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// A run path is one way the launcher runs a job: mpirun's (mpiRun), its
// own workers on the embedded transport (glooRun), node 0 and the other
// nodes of a multi-node job (masterNodeRun, otherNodeRun), and an elastic
// job's driver and its other nodes (elasticRun, elasticMemberRun). Every
// one takes the same steps, which drive sequences: plan what to run,
// start it, watch it until the job has ended, and tear down what plan and
// start set up (in reverse order, whatever step ended the run). What the
// paths share lives here: the teardown list, the stop signals passed on
// to the workers (preemption), the grace timers of a stop, and the end's
// verdict after an interrupt or a preemption.
type runPath interface {
	// plan prepares the job: its listeners, directories and workers'
	// plan. errNothingToRun ends the run with success (--dry-run).
	plan(ctx context.Context, td *teardown) error
	// start starts the job's processes (or the other nodes' part).
	start(ctx context.Context, td *teardown) error
	// watch waits until the job has ended and says how: Run's result.
	// ctx ends when the launcher is told to stop at once.
	watch(ctx context.Context, w *watching) error
	// forwards reports whether this path passes stop signals on to its
	// workers itself (w.signals); a path that does not either has a run
	// path inside it that does, or stops the job at once on a signal.
	forwards() bool
}

// errNothingToRun is a plan's word that the run is over and succeeded
// without starting anything (--dry-run).
var errNothingToRun = errors.New("launch: nothing to run")

// drive runs a run path's steps and its teardown.
func (l *Launcher) drive(ctx context.Context, p runPath) error {
	var td teardown
	defer td.run()
	if err := p.plan(ctx, &td); err != nil {
		if errors.Is(err, errNothingToRun) {
			return nil
		}
		return err
	}
	if err := p.start(ctx, &td); err != nil {
		return err
	}
	w := &watching{pre: preemptionOf(ctx), signals: make(chan os.Signal, 1)}
	if p.forwards() {
		w.pre.setForward(func(sig os.Signal) { w.signals <- sig })
	}
	return p.watch(ctx, w)
}

// teardown is what a run path's plan and start set up and the end of the
// run undoes, last first (as deferred calls would).
type teardown struct{ undo []func() }

// add adds f to the things to undo.
func (t *teardown) add(f func()) { t.undo = append(t.undo, f) }

func (t *teardown) run() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	t.undo = nil
}

// watching is what every run path's watch is given: the job's preemption
// and the stop signals to pass on to the workers.
type watching struct {
	pre     *preemption
	signals chan os.Signal
}

// verdict is a job's end after an interrupt (ErrInterrupted) or while it
// is preempted (the preemption's result over cause), with true; else
// false.
func (w *watching) verdict(interrupted bool, cause error) (bool, error) {
	switch {
	case interrupted:
		return true, ErrInterrupted
	case w.pre.preempting():
		return true, w.pre.result(cause)
	}
	return false, nil
}

// graceStop is the stop of a job's workers: SIGTERM, then SIGKILL once
// the grace period is over (kill fires).
type graceStop struct {
	stopping bool
	kill     <-chan time.Time
}

// begin starts the stop once and reports whether it started now.
func (g *graceStop) begin(grace time.Duration) bool {
	if g.stopping {
		return false
	}
	g.stopping, g.kill = true, time.After(grace)
	return true
}

// guardJob starts the guard of a job (see GuardMain) over its processes
// ps and directories dirs, unless the launcher has none; the guard is
// released at teardown. unguarded words the warning when it cannot start.
func (l *Launcher) guardJob(td *teardown, ps []*os.Process, dirs []string, mark string, unguarded func(error) string) {
	if l.Guard == "" {
		return
	}
	g, err := startGuard(l.Guard, ps, dirs, mark, l.Stderr)
	if err != nil {
		fmt.Fprintln(l.Stderr, "gohorovodrun: warning: "+unguarded(err))
	}
	td.add(g.release)
}
