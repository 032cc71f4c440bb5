package elastic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

type counters struct {
	Seen  int
	Names map[string]int
}

// model is one rank's training state in these tests.
type model struct {
	epoch, batch int
	c            counters
	w            []float64
	opt          optim.Optimizer
	sampler      *Sampler
	state        *State
}

func newModel(t testing.TB, rank, size int, b Broadcaster) *model {
	t.Helper()
	m := &model{epoch: rank, batch: 10 * rank, c: counters{Seen: rank, Names: map[string]int{"r": rank}}}
	m.w = []float64{float64(rank), float64(rank) + 0.5, -1}
	opt, err := optim.NewSGD([]optim.Param{{Name: "w", Value: tensor.FromFloat64(m.w), Grad: tensor.FromFloat64(make([]float64, 3))}},
		optim.SGDConfig{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	m.opt = opt
	if m.sampler, err = NewSampler(40, 3, 5, rank, size); err != nil {
		t.Fatal(err)
	}
	m.sampler.SetEpoch(rank)
	for range rank {
		m.sampler.Record()
	}
	objs, err := NewObjects(map[string]any{"epoch": &m.epoch, "batch": &m.batch, "counters": &m.c})
	if err != nil {
		t.Fatal(err)
	}
	oh, err := NewOptimizer(opt)
	if err != nil {
		t.Fatal(err)
	}
	if m.state, err = NewState(b, Named("objects", objs), Named("optimizer", oh), Named("sampler", NewSamplerHandler(m.sampler))); err != nil {
		t.Fatal(err)
	}
	return m
}

// train changes every part of the state.
func (m *model) train(t testing.TB) {
	t.Helper()
	m.epoch++
	m.batch = 0 // a zero value: gob does not send it, Restore must still restore it
	m.c.Seen += 5
	m.c.Names["x"] = 1
	g := m.opt.Params()[0].Grad.Float64s()
	for i := range g {
		g[i] = float64(i + 1)
	}
	if err := m.opt.Step(); err != nil {
		t.Fatal(err)
	}
	m.sampler.Record()
}

type snapshot struct {
	Epoch, Batch int
	C            counters
	W            []float64
	Opt          *optim.State
	SEpoch, SPos int
}

func (m *model) snap() snapshot {
	c := m.c
	c.Names = map[string]int{}
	for k, v := range m.c.Names {
		c.Names[k] = v
	}
	return snapshot{m.epoch, m.batch, c, slices.Clone(m.w), m.opt.State(), m.sampler.Epoch(), m.sampler.Processed()}
}

func sameSnap(t testing.TB, what string, got, want snapshot) {
	t.Helper()
	g, w := fmt.Sprintf("%v %v %v %v %v %v", got.Epoch, got.Batch, got.C, got.W, got.SEpoch, got.SPos), fmt.Sprintf("%v %v %v %v %v %v", want.Epoch, want.Batch, want.C, want.W, want.SEpoch, want.SPos)
	if g != w {
		t.Fatalf("%s: got %s, want %s", what, g, w)
	}
	if got.Opt.Kind != want.Opt.Kind || fmt.Sprint(got.Opt.Scalars) != fmt.Sprint(want.Opt.Scalars) {
		t.Fatalf("%s: optimizer scalars %v, want %v", what, got.Opt.Scalars, want.Opt.Scalars)
	}
	for k, wt := range want.Opt.Tensors {
		gv, wv := got.Opt.Tensors[k].Float64s(), wt.Float64s()
		for i := range wv {
			if math.Float64bits(gv[i]) != math.Float64bits(wv[i]) {
				t.Fatalf("%s: optimizer buffer %q = %v, want %v", what, k, gv, wv)
			}
		}
	}
}

func TestStateCommitRestore(t *testing.T) {
	m := newModel(t, 1, 2, nil)
	initial := m.snap()
	m.train(t)
	if err := m.state.Restore(); err != nil {
		t.Fatal(err)
	}
	sameSnap(t, "restore before any commit", m.snap(), initial)

	m.train(t)
	m.train(t)
	if err := m.state.Commit(); err != nil {
		t.Fatal(err)
	}
	committed := m.snap()
	m.train(t)
	m.train(t)
	if m.snap().Epoch == committed.Epoch {
		t.Fatal("train did not change the state")
	}
	if err := m.state.Restore(); err != nil {
		t.Fatal(err)
	}
	sameSnap(t, "restore", m.snap(), committed)
	// Restoring twice is the same as once.
	m.train(t)
	if err := m.state.Restore(); err != nil {
		t.Fatal(err)
	}
	sameSnap(t, "second restore", m.snap(), committed)
}

func TestStateSyncFromRankZero(t *testing.T) {
	const n = 3
	h := newHub(n)
	ms := make([]*model, n)
	for r := range ms {
		ms[r] = newModel(t, r, n, h.rank(r))
		for range r {
			ms[r].train(t)
		}
	}
	want := ms[0].snap()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range ms {
		wg.Go(func() { errs[r] = ms[r].state.Sync(context.Background()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, m := range ms {
		sameSnap(t, fmt.Sprintf("rank %d after sync", r), m.snap(), want)
		// Sync snapshots: a restore returns to rank 0's values.
		m.train(t)
		if err := m.state.Restore(); err != nil {
			t.Fatal(err)
		}
		sameSnap(t, fmt.Sprintf("rank %d restored after sync", r), m.snap(), want)
	}
}

func TestStateSyncRuntime(t *testing.T) {
	const n = 3
	ms := make([]*model, n)
	for r := range ms {
		ms[r] = newModel(t, r, n, nil)
		for range r {
			ms[r].train(t)
		}
	}
	want := ms[0].snap()
	err := hvd.RunLocal(n, func(rt *hvd.Runtime, rank int) error {
		b := FromRuntime(rt)
		// Empty and non-empty payloads.
		for _, p := range [][]byte{{}, []byte("hello")} {
			var mine []byte
			if rank == 1 {
				mine = p
			}
			got, err := b.BroadcastBytes(context.Background(), mine, 1)
			if err != nil {
				return err
			}
			if string(got) != string(p) {
				return fmt.Errorf("got %q from rank 1, want %q", got, p)
			}
		}
		ms[rank].state.SetBroadcaster(b)
		return ms[rank].state.Sync(context.Background())
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, m := range ms {
		sameSnap(t, fmt.Sprintf("rank %d after sync", r), m.snap(), want)
	}
}

func TestStateSyncMismatch(t *testing.T) {
	h := newHub(2)
	a := newModel(t, 0, 2, h.rank(0))
	// Rank 1's optimizer has another parameter name.
	w := tensor.FromFloat64([]float64{1, 2, 3})
	opt, err := optim.NewSGD([]optim.Param{{Name: "v", Value: w, Grad: tensor.FromFloat64(make([]float64, 3))}}, optim.SGDConfig{LR: 0.1, Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	oh, _ := NewOptimizer(opt)
	bs, err := NewState(h.rank(1), Named("optimizer", oh))
	if err != nil {
		t.Fatal(err)
	}
	ah, _ := NewOptimizer(a.opt)
	as, _ := NewState(h.rank(0), Named("optimizer", ah))
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() { errA = as.Sync(context.Background()) })
	errB := bs.Sync(context.Background())
	wg.Wait()
	if errA != nil {
		t.Fatalf("rank 0: %v", errA)
	}
	if errB == nil || !strings.Contains(errB.Error(), `"w"`) || !strings.Contains(errB.Error(), `"optimizer"`) {
		t.Fatalf("rank 1: got %v, want an error naming the handler and the parameter", errB)
	}
	if w.Float64s()[0] != 1 {
		t.Fatal("a failed sync changed the parameters")
	}
}

func TestStateSyncWithoutBroadcaster(t *testing.T) {
	s, err := NewState(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(context.Background()); !errors.Is(err, ErrNoBroadcaster) {
		t.Fatalf("got %v, want ErrNoBroadcaster", err)
	}
}

func TestStateResetCallbacks(t *testing.T) {
	s, _ := NewState(nil)
	var order []int
	boom := errors.New("boom")
	s.RegisterResetCallback(func() error { order = append(order, 0); return nil })
	s.RegisterResetCallback(func() error { order = append(order, 1); return nil })
	if err := s.Reset(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []int{0, 1}) {
		t.Fatalf("order %v", order)
	}
	order = nil
	s.RegisterResetCallback(func() error { order = append(order, 2); return boom })
	s.RegisterResetCallback(func() error { order = append(order, 3); return nil })
	err := s.Reset()
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "reset callback 2") {
		t.Fatalf("got %v, want boom from callback 2", err)
	}
	if !slices.Equal(order, []int{0, 1, 2}) {
		t.Fatalf("order %v: the callbacks after a failure must not run", order)
	}
}

func TestStateCommitCheck(t *testing.T) {
	x := 1
	objs, _ := NewObjects(map[string]any{"x": &x})
	s, _ := NewState(nil, Named("x", objs))
	hosts := errors.New("hosts updated")
	s.SetCommitCheck(func() error { return hosts })
	x = 2
	if err := s.Commit(); !errors.Is(err, hosts) {
		t.Fatalf("got %v, want the check's error", err)
	}
	x = 3
	if err := s.Restore(); err != nil || x != 2 {
		t.Fatalf("x = %d, %v: the snapshot is taken before the check", x, err)
	}
}

func TestNewStateErrors(t *testing.T) {
	x := 1
	objs, _ := NewObjects(map[string]any{"x": &x})
	if _, err := NewState(nil, Named("a", objs), Named("a", objs)); err == nil {
		t.Error("duplicate names accepted")
	}
	if _, err := NewState(nil, Named("a", nil)); err == nil {
		t.Error("nil handler accepted")
	}
	if _, err := NewObjects(map[string]any{"x": x}); err == nil {
		t.Error("a non-pointer accepted")
	}
	if _, err := NewObjects(map[string]any{"f": new(func())}); err == nil {
		t.Error("a value gob cannot encode accepted")
	}
	if _, err := NewOptimizer(nil); err == nil {
		t.Error("nil optimizer accepted")
	}
}
