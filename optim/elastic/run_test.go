package elastic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/secret"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// job is an elastic job in one process: a RoundServer that the test
// drives as the launcher would, and workers that are Runtimes in
// goroutines.
type job struct {
	t      *testing.T
	srv    *rendezvous.RoundServer
	ready  chan rendezvous.Slot
	port   int
	secret string
}

func newJob(t *testing.T) *job {
	t.Helper()
	hex, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := secret.Parse(hex)
	srv, err := rendezvous.NewRoundServer(key)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{t: t, srv: srv, ready: make(chan rendezvous.Slot, 64), secret: hex}
	srv.OnReady = func(s rendezvous.Slot) { j.ready <- s }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip("no loopback TCP:", err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	j.port = ln.Addr().(*net.TCPAddr).Port
	return j
}

// config is the environment an elastic launcher gives the worker of s.
func (j *job) config(s rendezvous.Slot) config.Config {
	c := config.Default()
	c.CycleTime = time.Millisecond
	c.Controller = config.ControllerGloo
	c.RendezvousAddr, c.RendezvousPort = "127.0.0.1", j.port
	c.Secret = config.Secret(j.secret)
	c.Hostname, c.LocalRank = s.Host, s.LocalRank
	c.GlooTimeout = 20 * time.Second
	c.Elastic = true
	return c
}

// waitReady waits for the ready reports of want, in any order.
func (j *job) waitReady(want ...rendezvous.Slot) {
	j.t.Helper()
	left := map[rendezvous.Slot]bool{}
	for _, s := range want {
		left[s] = true
	}
	for len(left) > 0 {
		select {
		case s := <-j.ready:
			if !left[s] {
				j.t.Fatalf("unexpected ready report of %v", s)
			}
			delete(left, s)
		case <-time.After(20 * time.Second):
			j.t.Fatalf("still waiting for %v to be ready", left)
		}
	}
}

// worker is one elastic worker: a counter model that adds, at every step,
// the group size reduced over the group (so each step adds size·size...
// no: each rank adds 1, reduced: the size), and commits every step.
type worker struct {
	slot  rendezvous.Slot
	rt    *hvd.Runtime
	step  int
	total float64
	sizes []int // the group size at each step it ran
	state *State
	// failAt, when > 0, makes the worker stop its runtime (as a dying
	// process would cut its connections) at that step.
	failAt int
	err    error
	done   chan struct{}
}

func (j *job) start(s rendezvous.Slot, steps int, failAt int, hook func(w *worker)) *worker {
	w := &worker{slot: s, rt: new(hvd.Runtime), failAt: failAt, done: make(chan struct{})}
	objs, err := NewObjects(map[string]any{"step": &w.step, "total": &w.total})
	if err != nil {
		j.t.Fatal(err)
	}
	if w.state, err = NewState(nil, Named("objects", objs)); err != nil {
		j.t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		if err := w.rt.Init(hvd.WithConfig(j.config(s)), hvd.WithLogger(zerolog.Nop())); err != nil {
			w.err = err
			return
		}
		defer w.rt.Shutdown()
		ctx := context.Background()
		w.err = Run(ctx, w.state, func(ctx context.Context) error {
			for w.step < steps {
				if w.failAt > 0 && w.step == w.failAt {
					w.rt.Shutdown()
					return errors.New("worker died")
				}
				t := tensor.FromFloat64([]float64{1})
				if err := w.rt.AllreduceInPlace(ctx, t, "count", hvd.Sum); err != nil {
					return err
				}
				w.total += t.Float64s()[0]
				w.sizes = append(w.sizes, w.rt.Size())
				w.step++
				if hook != nil {
					hook(w)
				}
				if err := w.state.Commit(); err != nil {
					return err
				}
			}
			return nil
		}, WithRuntime(w.rt))
	}()
	return w
}

func (w *worker) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-w.done:
		return w.err
	case <-time.After(60 * time.Second):
		t.Fatalf("worker %v did not finish", w.slot)
	}
	return nil
}

var (
	a0 = rendezvous.Slot{Host: "a", LocalRank: 0}
	a1 = rendezvous.Slot{Host: "a", LocalRank: 1}
	b0 = rendezvous.Slot{Host: "b", LocalRank: 0}
	c0 = rendezvous.Slot{Host: "c", LocalRank: 0}
)

// TestRunWorkerFailure: b's worker dies at step 5 of 12; a's two workers
// restore the last commit, re-form as a group of two and finish; no step
// is lost or counted twice.
func TestRunWorkerFailure(t *testing.T) {
	j := newJob(t)
	if err := j.srv.StartRound(1, []rendezvous.Slot{a0, a1, b0}); err != nil {
		t.Fatal(err)
	}
	const steps, failAt = 12, 5
	w0, w1 := j.start(a0, steps, 0, nil), j.start(a1, steps, 0, nil)
	wb := j.start(b0, steps, failAt, nil)
	if err := wb.wait(t); err == nil || !strings.Contains(err.Error(), "worker died") {
		t.Fatalf("the failing worker's Run returned %v", err)
	}
	j.waitReady(a0, a1) // the survivors ask for the next round
	if err := j.srv.StartRound(2, []rendezvous.Slot{a0, a1}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*worker{w0, w1} {
		if err := w.wait(t); err != nil {
			t.Fatalf("%v: %v", w.slot, err)
		}
		// Steps 0..4 at size 3, then 5..11 at size 2 (the step that
		// failed, if any ran on a survivor, was restored away).
		want := 3.0*failAt + 2.0*(steps-failAt)
		if w.step != steps || w.total != want {
			t.Fatalf("%v: step %d total %v, want %d and %v (sizes %v)", w.slot, w.step, w.total, steps, want, w.sizes)
		}
		if w.rt.Size() != 2 || w.rt.ElasticRound() != 2 {
			t.Fatalf("%v: size %d round %d after the reset", w.slot, w.rt.Size(), w.rt.ElasticRound())
		}
	}
}

// TestRunHostsAdded: the launcher announces a new host; every rank
// re-forms at the next commit without restoring, and the new worker starts
// from rank 0's state.
func TestRunHostsAdded(t *testing.T) {
	j := newJob(t)
	if err := j.srv.StartRound(1, []rendezvous.Slot{a0, a1}); err != nil {
		t.Fatal(err)
	}
	const steps = 10
	var once sync.Once
	notify := func(w *worker) {
		if w.slot == a0 && w.step == 3 {
			once.Do(func() {
				if err := j.srv.Notify(a0, rendezvous.HostUpdate{Seq: 1, Added: true}); err != nil {
					t.Error(err)
				}
				time.Sleep(20 * time.Millisecond) // let it arrive before the commit
			})
		}
	}
	w0, w1 := j.start(a0, steps, 0, notify), j.start(a1, steps, 0, notify)
	j.waitReady(a0, a1)
	if err := j.srv.StartRound(2, []rendezvous.Slot{a0, a1, c0}); err != nil {
		t.Fatal(err)
	}
	wc := j.start(c0, steps, 0, nil)
	for _, w := range []*worker{w0, w1, wc} {
		if err := w.wait(t); err != nil {
			t.Fatalf("%v: %v", w.slot, err)
		}
		want := 2.0*3 + 3.0*(steps-3)
		if w.step != steps || w.total != want {
			t.Fatalf("%v: step %d total %v, want %d and %v (sizes %v)", w.slot, w.step, w.total, steps, want, w.sizes)
		}
	}
	if len(wc.sizes) != steps-3 {
		t.Fatalf("the new worker ran %d steps, want %d", len(wc.sizes), steps-3)
	}
}

// TestRunRemoved: after a host update, the new round has no place for b's
// worker: its Run returns ErrRemoved and the others finish.
func TestRunRemoved(t *testing.T) {
	j := newJob(t)
	if err := j.srv.StartRound(1, []rendezvous.Slot{a0, b0}); err != nil {
		t.Fatal(err)
	}
	const steps = 6
	var once sync.Once
	notify := func(w *worker) {
		if w.slot == a0 && w.step == 2 {
			once.Do(func() {
				_ = j.srv.Notify(a0, rendezvous.HostUpdate{Seq: 1, Removed: true})
				time.Sleep(20 * time.Millisecond)
			})
		}
	}
	w0, wb := j.start(a0, steps, 0, notify), j.start(b0, steps, 0, notify)
	j.waitReady(a0, b0)
	if err := j.srv.StartRound(2, []rendezvous.Slot{a0}); err != nil {
		t.Fatal(err)
	}
	if err := wb.wait(t); !errors.Is(err, ErrRemoved) {
		t.Fatalf("removed worker: %v, want ErrRemoved", err)
	}
	if err := w0.wait(t); err != nil || w0.step != steps || w0.total != 2*2+1*(steps-2) {
		t.Fatalf("a0: %v, step %d total %v", err, w0.step, w0.total)
	}
}

// TestRunRefuses: Run before Init, in a fixed (not elastic) job, and after
// a collective ran between Init and Run.
func TestRunRefuses(t *testing.T) {
	noop := func(context.Context) error { return nil }
	st, err := NewState(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), st, noop, WithRuntime(new(hvd.Runtime))); !errors.Is(err, hvd.ErrNotInitialized) {
		t.Fatalf("before Init: %v", err)
	}
	rts, err := hvd.StartLocal(2, hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	defer hvd.StopLocal(rts)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, r := range rts {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = Run(context.Background(), st, noop, WithRuntime(r)) }()
	}
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, ErrNotElastic) {
			t.Fatalf("fixed job: %v, want ErrNotElastic", err)
		}
	}

	j := newJob(t)
	if err := j.srv.StartRound(1, []rendezvous.Slot{a0}); err != nil {
		t.Fatal(err)
	}
	r := new(hvd.Runtime)
	if err := r.Init(hvd.WithConfig(j.config(a0)), hvd.WithLogger(zerolog.Nop())); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	if err := r.AllreduceInPlace(context.Background(), tensor.FromFloat64([]float64{1}), "early", hvd.Sum); err != nil {
		t.Fatal(err)
	}
	st2, _ := NewState(nil)
	if err := Run(context.Background(), st2, noop, WithRuntime(r)); !errors.Is(err, ErrCollectiveBeforeRun) {
		t.Fatalf("collective before Run: %v", err)
	}
}

// TestRunAlone: a process started alone runs train once, with no reset.
func TestRunAlone(t *testing.T) {
	rts, err := hvd.StartLocal(1, hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	defer hvd.StopLocal(rts)
	st, _ := NewState(nil)
	calls := 0
	err = Run(context.Background(), st, func(context.Context) error { calls++; return fmt.Errorf("boom") }, WithRuntime(rts[0]))
	if err == nil || err.Error() != "boom" || calls != 1 {
		t.Fatalf("got %v after %d calls", err, calls)
	}
}
