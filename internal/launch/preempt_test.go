package launch

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	ipreempt "github.com/gohorovod/gohorovod/internal/preempt"
)

// The job's result from its workers' exits while it is being preempted.
func TestPreemptionResult(t *testing.T) {
	other := errors.New("rank 1 failed")
	cases := []struct {
		name   string
		signal bool
		exits  []int
		err    error
		want   error // nil: a failure that is neither
	}{
		{"every worker preempted", true, []int{ExitPreempted, ExitPreempted}, nil, ErrPreempted},
		{"the workers preempted by themselves", false, []int{ExitPreempted, ExitPreempted}, nil, ErrPreempted},
		{"killed by the signal passed on", true, []int{143, 143}, nil, ErrInterrupted},
		{"one preempted, one failed, no signal", false, []int{ExitPreempted, 1}, nil, nil},
		{"one preempted, one failed, its error", false, []int{ExitPreempted, 1}, other, other},
	}
	for _, c := range cases {
		_, cancel := context.WithCancel(context.Background())
		p := &preemption{stderr: io.Discard, cancel: cancel}
		p.setForward(func(os.Signal) {})
		if c.signal {
			p.signal(syscall.SIGTERM)
		}
		for _, s := range c.exits {
			p.exited(s)
		}
		got := p.result(c.err)
		switch {
		case c.want != nil && !errors.Is(got, c.want):
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		case c.want == nil && (got == nil || errors.Is(got, ErrPreempted) || errors.Is(got, ErrInterrupted)):
			t.Errorf("%s: %v, want a failure", c.name, got)
		}
		if p.timer != nil {
			p.timer.Stop()
		}
		cancel()
	}
	var none *preemption
	if none.result(other) != other || none.preempting() || none.exited(ExitPreempted) {
		t.Error("a nil preemption is not inert")
	}
}

// A signal before the workers are started, and a second signal, stop the
// job at once; the grace period does too.
func TestPreemptionStops(t *testing.T) {
	stopped := func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &preemption{stderr: io.Discard, cancel: cancel}
	p.signal(syscall.SIGTERM)
	if !stopped(ctx) {
		t.Error("a signal before any worker was started did not stop the job")
	}
	ctx, cancel = context.WithCancel(context.Background())
	p = &preemption{stderr: io.Discard, cancel: cancel}
	var fwd []os.Signal
	p.setForward(func(s os.Signal) { fwd = append(fwd, s) })
	p.m.Grace = 100 * time.Millisecond
	p.signal(syscall.SIGUSR1)
	if len(fwd) != 1 || fwd[0] != syscall.SIGUSR1 {
		t.Errorf("forwarded %v, want SIGUSR1 once", fwd)
	}
	if !stopped(ctx) {
		t.Error("the grace period ran out and the job was not stopped")
	}
}

// TestPreemptionNeedsAListener: a signal is passed on, and the job given
// its grace period, only when a worker announced in the preemption's
// directory that it watches (optim/preempt); otherwise the job stops at
// once, as a program that does not checkpoint must. The workers' environment
// names the directory, replacing any inherited one.
func TestPreemptionNeedsAListener(t *testing.T) {
	dir := t.TempDir()
	// The directory's own lock file is no listener.
	if err := os.WriteFile(filepath.Join(dir, ".lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() (*preemption, context.Context, *[]os.Signal) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		p := &preemption{stderr: io.Discard, cancel: cancel, dir: dir}
		p.m.Grace = time.Hour
		var fwd []os.Signal
		p.setForward(func(s os.Signal) { fwd = append(fwd, s) })
		return p, ctx, &fwd
	}
	p, ctx, fwd := start()
	p.signal(syscall.SIGTERM)
	if len(*fwd) != 0 || ctx.Err() == nil {
		t.Errorf("no listener: forwarded %v, job stopped %v; want nothing forwarded and the job stopped", *fwd, ctx.Err() != nil)
	}
	if err := os.WriteFile(filepath.Join(dir, "4242"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p, ctx, fwd = start()
	p.signal(syscall.SIGTERM)
	if len(*fwd) != 1 || ctx.Err() != nil {
		t.Errorf("a listener: forwarded %v, job stopped %v; want SIGTERM forwarded and the job running", *fwd, ctx.Err() != nil)
	}
	env := p.workerEnviron([]string{"A=1", ipreempt.EnvListeners + "=/elsewhere"})
	if want := []string{"A=1", ipreempt.EnvListeners + "=" + dir}; !slices.Equal(env, want) {
		t.Errorf("workerEnviron: %q, want %q", env, want)
	}
}
