package preempt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ipreempt "github.com/gohorovod/gohorovod/internal/preempt"
	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// train runs steps on every rank of an in-process job: signal(rank, step)
// may signal a rank's watcher before its step's Check. It returns the step
// at which each rank's Check returned an error, the errors, and how many
// times each rank's save ran.
func train(t *testing.T, n, steps int, o Options, signal func(w *Watcher, rank, step int), save func(rank int) error) ([]int, []error, []int) {
	t.Helper()
	at, errs, saves := make([]int, n), make([]error, n), make([]int, n)
	if o.Log == nil {
		o.Log = io.Discard
	}
	err := hvd.RunLocal(n, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		w, err := Watch(coll, o)
		if err != nil {
			return err
		}
		defer w.Close()
		at[rank] = -1
		for step := 0; step < steps; step++ {
			signal(w, rank, step)
			if err := w.Check(func() error { saves[rank]++; return save(rank) }); err != nil {
				at[rank], errs[rank] = step, err
				return nil
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return at, errs, saves
}

func noSave(int) error { return nil }

// Only rank 2 is told to stop, during step 7: every rank stops after step
// 7, checkpoints once, and returns ErrPreempted.
func TestEveryRankStopsAtTheSameStep(t *testing.T) {
	at, errs, saves := train(t, 4, 40, Options{Signals: []os.Signal{}}, func(w *Watcher, rank, step int) {
		if rank == 2 && step == 7 {
			w.Signal(syscall.SIGTERM)
		}
	}, noSave)
	for r := range at {
		if at[r] != 7 || !errors.Is(errs[r], ErrPreempted) || saves[r] != 1 {
			t.Errorf("rank %d: stopped at step %d with %v after %d saves; want step 7, ErrPreempted, 1 save", r, at[r], errs[r], saves[r])
		}
		if ExitCode(errs[r]) != ExitStatus {
			t.Errorf("rank %d: exit code %d", r, ExitCode(errs[r]))
		}
	}
}

func TestNoSignalNoStop(t *testing.T) {
	at, _, saves := train(t, 2, 20, Options{Signals: []os.Signal{}}, func(*Watcher, int, int) {}, noSave)
	for r := range at {
		if at[r] != -1 || saves[r] != 0 {
			t.Errorf("rank %d stopped at %d with %d saves, untold", r, at[r], saves[r])
		}
	}
}

// A checkpoint that fails on one rank is reported on every rank, and is
// no clean preemption.
func TestSaveFails(t *testing.T) {
	_, errs, _ := train(t, 3, 10, Options{Signals: []os.Signal{}}, func(w *Watcher, rank, step int) {
		if rank == 0 && step == 2 {
			w.Signal(syscall.SIGUSR1)
		}
	}, func(rank int) error {
		if rank == 1 {
			return errors.New("disk full")
		}
		return nil
	})
	for r, err := range errs {
		if err == nil || errors.Is(err, ErrPreempted) || ExitCode(err) != 1 {
			t.Errorf("rank %d: %v", r, err)
			continue
		}
		want := "on 1 rank(s)"
		if r == 1 {
			want = "disk full"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want it to say %q", r, err, want)
		}
	}
}

// exits records what the watcher's Exit was called with.
type exits struct {
	mu    sync.Mutex
	codes []int
	ch    chan int
}

func newExits() *exits { return &exits{ch: make(chan int, 4)} }

func (e *exits) exit(code int) {
	e.mu.Lock()
	e.codes = append(e.codes, code)
	e.mu.Unlock()
	e.ch <- code
}

func watchOne(t *testing.T, o Options) *Watcher {
	t.Helper()
	rts, err := hvd.StartLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rts[0].Shutdown() })
	coll, err := optim.FromRuntime(rts[0])
	if err != nil {
		t.Fatal(err)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	w, err := Watch(coll, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// A second signal, or the grace period running out, ends the process at
// once with 128 + the signal's number.
func TestEndsAtOnce(t *testing.T) {
	cases := []struct {
		name  string
		grace time.Duration
		sigs  []syscall.Signal
		want  int
	}{
		{"a second signal", time.Minute, []syscall.Signal{syscall.SIGTERM, syscall.SIGINT}, 128 + int(syscall.SIGINT)},
		{"the grace period", 50 * time.Millisecond, []syscall.Signal{syscall.SIGTERM}, 128 + int(syscall.SIGTERM)},
	}
	for _, c := range cases {
		e := newExits()
		w := watchOne(t, Options{Signals: []os.Signal{}, Exit: e.exit, Grace: c.grace})
		for i, s := range c.sigs {
			if i > 0 {
				time.Sleep(ipreempt.Echo) // sooner, it is the first one echoed
			}
			w.Signal(s)
		}
		select {
		case code := <-e.ch:
			if code != c.want {
				t.Errorf("%s: exit status %d, want %d", c.name, code, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not end the process", c.name)
		}
	}
}

// The grace timer is cancelled by Close: a program that stopped in time
// is not killed afterwards.
func TestCloseCancelsGrace(t *testing.T) {
	e := newExits()
	w := watchOne(t, Options{Signals: []os.Signal{}, Exit: e.exit, Grace: 100 * time.Millisecond})
	w.Signal(syscall.SIGTERM)
	if err := w.Check(nil); !errors.Is(err, ErrPreempted) {
		t.Fatalf("Check: %v", err)
	}
	w.Close()
	time.Sleep(300 * time.Millisecond)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.codes) != 0 {
		t.Errorf("the process was ended with %v after Close", e.codes)
	}
}

// A real SIGUSR1 to the process is caught and asks for the stop.
func TestRealSignal(t *testing.T) {
	w := watchOne(t, Options{Signals: []os.Signal{syscall.SIGUSR1}})
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !w.Requested() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := w.Check(nil); !errors.Is(err, ErrPreempted) {
		t.Errorf("Check after SIGUSR1: %v", err)
	}
}

func TestWatchBadInput(t *testing.T) {
	if _, err := Watch(nil, Options{}); err == nil {
		t.Error("Watch without collectives")
	}
	rts, err := hvd.StartLocal(1)
	if err != nil {
		t.Fatal(err)
	}
	defer rts[0].Shutdown()
	coll, _ := optim.FromRuntime(rts[0])
	if _, err := Watch(coll, Options{Grace: -time.Second}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("a negative grace: %v", err)
	}
	if ExitCode(nil) != 0 || ExitCode(fmt.Errorf("x: %w", ErrPreempted)) != ExitStatus || ExitCode(errors.New("x")) != 1 {
		t.Error("ExitCode")
	}
}

// TestAnnouncesToTheLauncher: under gohorovodrun (GOHOROVOD_PREEMPT_DIR
// set), a Watcher keeps a file named by its pid there while it watches,
// so that the launcher passes a stop signal on instead of ending the job.
func TestAnnouncesToTheLauncher(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ipreempt.EnvListeners, dir)
	w := watchOne(t, Options{Exit: func(int) {}})
	mark := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("no announcement while watching: %v", err)
	}
	w.Close()
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Fatalf("the announcement outlived Close: %v", err)
	}
	if got := announce(filepath.Join(dir, "not-here")); got != "" {
		t.Errorf("announce in a directory that does not exist: %q, want none", got)
	}
}
