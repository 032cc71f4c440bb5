package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	ipreempt "github.com/gohorovod/gohorovod/internal/preempt"
	"github.com/gohorovod/gohorovod/internal/sockdir"
)

// ExitPreempted is gohorovodrun's exit status when its job was preempted:
// told to stop (SIGTERM, SIGUSR1, SIGINT to the launcher, or to the
// workers themselves), every worker stopped at the same step boundary
// after its checkpoint and exited with this status (optim/preempt). It is
// distinct from a failure's status, and from the 75 of a rank that ended
// itself because another one froze.
const ExitPreempted = ipreempt.ExitStatus

// ErrPreempted is Run's result for a preempted job.
var ErrPreempted = errors.New("launch: preempted: every worker stopped at a step boundary after its checkpoint")

// StopSignals are the signals gohorovodrun passes on to its workers as a
// request to stop at the next step boundary (see Launcher.Signals).
var StopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGINT}

// preemption is a job's edge of the preempt.Launch machine: it forwards
// the first signal to the workers (through the run path's forward
// function), cancels the job's context (the run path's stop, SIGTERM and
// SIGKILL) on a second signal or when the grace period runs out, and
// counts the workers' exits. A nil *preemption does nothing: the run
// paths work without one.
type preemption struct {
	stderr io.Writer
	cancel context.CancelFunc

	mu      sync.Mutex
	m       ipreempt.Launch
	forward func(os.Signal)
	timer   *time.Timer
	done    chan struct{}
	// dir is where the workers on this host that stop at step
	// boundaries announce themselves (preempt.EnvListeners); "" when it
	// could not be made, and then every job is taken to listen.
	dir string
}

// preemptionKey carries a Run's preemption in its context to the run
// paths.
type preemptionKey struct{}

// preemptionOf returns the preemption of the Run whose context ctx is, or
// nil.
func preemptionOf(ctx context.Context) *preemption {
	p, _ := ctx.Value(preemptionKey{}).(*preemption)
	return p
}

// watchSignals starts a job's preemption over l.Signals, with the
// workers given grace to stop (0: the default): the returned
// context ends on a second signal or when the grace period runs out; stop
// ends the watching.
func (l *Launcher) watchSignals(ctx context.Context, grace time.Duration) (context.Context, *preemption, func()) {
	if l.Signals == nil {
		return ctx, nil, func() {}
	}
	jctx, cancel := context.WithCancel(ctx)
	p := &preemption{stderr: l.Stderr, cancel: cancel, done: make(chan struct{})}
	p.m.Grace = grace
	// A private directory locked for the launcher's life (sockdir), so
	// that one left by a killed launcher is removed by the next.
	if dir, err := sockdir.Make(os.TempDir()); err == nil {
		p.dir = dir
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-p.done:
				return
			case s := <-l.Signals:
				p.signal(s)
			}
		}
	}()
	return jctx, p, func() {
		close(p.done)
		wg.Wait()
		p.mu.Lock()
		if p.timer != nil {
			p.timer.Stop()
		}
		p.mu.Unlock()
		cancel()
		if p.dir != "" {
			sockdir.Remove(p.dir)
		}
	}
}

// listened reports whether a worker on this host watches for stop
// signals (it announced itself in p.dir), so that passing a signal on
// lets the job stop at a step boundary.
func (p *preemption) listened() bool {
	if p.dir == "" {
		return true
	}
	entries, _ := os.ReadDir(p.dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") { // not the directory's lock
			return true
		}
	}
	return false
}

// workerEnviron is environ with preempt.EnvListeners naming the directory
// in which the job's workers announce that they listen.
func (p *preemption) workerEnviron(environ []string) []string {
	if p == nil || p.dir == "" {
		return environ
	}
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, ipreempt.EnvListeners+"=") {
			out = append(out, kv)
		}
	}
	return append(out, ipreempt.EnvListeners+"="+p.dir)
}

func (p *preemption) signal(s os.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.m.Signal(time.Now()) {
	case ipreempt.Forward:
		if p.forward == nil {
			// No workers yet (or a run path that cannot pass signals
			// on): nothing can stop at a step boundary; stop at once.
			fmt.Fprintf(p.stderr, "gohorovodrun: no workers to pass %v on to; stopping now\n", s)
			p.cancel()
			return
		}
		if !p.listened() {
			// A program that does not checkpoint when told to
			// (optim/preempt) is stopped at once, as always.
			fmt.Fprintf(p.stderr, "gohorovodrun: no worker here watches for %v (optim/preempt); stopping them now\n", s)
			p.cancel()
			return
		}
		d, _ := p.m.Deadline()
		fmt.Fprintf(p.stderr, "gohorovodrun: %v: asking the workers to stop at their next step boundary (within %v; again to stop them at once)\n",
			s, time.Until(d).Round(time.Second))
		p.forward(s)
		p.arm()
	case ipreempt.StopNow:
		fmt.Fprintf(p.stderr, "gohorovodrun: %v again: stopping the workers now\n", s)
		p.cancel()
	}
}

// arm starts the grace period's timer, once.
func (p *preemption) arm() {
	d, ok := p.m.Deadline()
	if !ok || p.timer != nil {
		return
	}
	p.timer = time.AfterFunc(time.Until(d), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.m.Tick(time.Now()) == ipreempt.StopNow {
			fmt.Fprintf(p.stderr, "gohorovodrun: the workers did not stop within the grace period; stopping them now\n")
			p.cancel()
		}
	})
}

// setForward tells the preemption how to pass a signal on to the job's
// workers, once they are started. A signal before that stops the job at
// once.
func (p *preemption) setForward(f func(os.Signal)) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forward = f
}

// exited records a worker's exit status (128+N for a signal N) and
// reports whether it is a preempted worker's, which is no failure.
func (p *preemption) exited(status int) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m.Exited(status, time.Now())
	p.arm()
	return status == ExitPreempted
}

// preempted reports whether the job ended by preemption.
func (p *preemption) preempted() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m.Preempted()
}

// preempting reports whether the job is being stopped by preemption.
func (p *preemption) preempting() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m.Preempting()
}

// result turns a run path's result into the job's: ErrPreempted when its
// workers were preempted, ErrInterrupted when the launcher was told to
// stop and they were not (they did not stop at a step boundary: they were
// killed), else err, or, when err is nil, a failure if a worker failed
// while the others stopped.
func (p *preemption) result(err error) error {
	if p == nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.m.Preempted():
		return ErrPreempted
	case p.m.Signaled():
		return ErrInterrupted
	case err == nil && p.m.Failed() > 0:
		return errors.New("launch: a worker failed while the others stopped when told to (preempted)")
	}
	return err
}

// exitStatus is the status of a worker's Wait error: 0, its exit
// status, or 128+N when signal N killed it.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee interface{ Sys() any }
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
	return -1
}
