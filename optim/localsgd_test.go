package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// localSGDLinear is the SGD of the local SGD tests: momentum, Nesterov and
// weight decay are all linear in the gradient, so that averaging the
// parameters after every local step equals synchronous SGD (see
// TestPostLocalSGDPeriodOneIsSynchronous).
var localSGDLinear = SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}

// localRun trains the linear model (seeded by rank, then broadcast from
// rank 0) with post-local SGD on rank's share of each global batch (so
// that the ranks' gradients differ) and returns the parameters after each
// step. check, if not nil, runs after each step.
func localRun(ctx context.Context, rt *hvd.Runtime, rank, size, steps int, sgd SGDConfig, cfg LocalSGDConfig,
	check func(step int, o *PostLocalSGD, params []float64) error, opts ...DistOption) ([][]float64, error) {
	const d, batch = 6, 24
	coll, err := FromRuntime(rt)
	if err != nil {
		return nil, err
	}
	m := newLinear(d, uint64(rank)+1)
	if err := BroadcastParameters(ctx, coll, m.params, 0); err != nil {
		return nil, err
	}
	inner, err := NewSGD(m.params, sgd)
	if err != nil {
		return nil, err
	}
	dist, err := NewDistributed(inner, coll, opts...)
	if err != nil {
		return nil, err
	}
	o, err := NewPostLocalSGD(dist, cfg)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	per := batch / size
	var out [][]float64
	for s := range steps {
		xs, ys := linearBatch(s, d, batch)
		if err := o.ZeroGrad(); err != nil {
			return nil, err
		}
		if err := m.backward(xs[rank*per*d:(rank+1)*per*d], ys[rank*per:(rank+1)*per], o.Ready); err != nil {
			return nil, err
		}
		if err := o.StepContext(ctx); err != nil {
			return nil, fmt.Errorf("step %d: %w", s+1, err)
		}
		out = append(out, append(slices.Clone(m.w), m.b...))
		if check != nil {
			if err := check(s+1, o, out[s]); err != nil {
				return nil, fmt.Errorf("step %d: %w", s+1, err)
			}
		}
	}
	return out, nil
}

// localRuns runs localRun on every rank of rts and returns each rank's
// parameters after each step.
func localRuns(t *testing.T, rts []*hvd.Runtime, steps int, sgd SGDConfig, cfg LocalSGDConfig,
	check func(rank, step int, o *PostLocalSGD) error, opts ...DistOption) [][][]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make([][][]float64, len(rts))
	onRanks(t, len(rts), func(rank int) error {
		var c func(int, *PostLocalSGD, []float64) error
		if check != nil {
			c = func(step int, o *PostLocalSGD, _ []float64) error { return check(rank, step, o) }
		}
		got, err := localRun(ctx, rts[rank], rank, len(rts), steps, sgd, cfg, c, opts...)
		out[rank] = got
		return err
	})
	return out
}

// maxDiff is the largest difference between two parameter vectors.
func maxDiff(a, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

// TestPostLocalSGDPeriodOneIsSynchronous: averaging after every local step
// is synchronous SGD. From identical parameters p, rank i steps to
// p - lr·u(g_i), and the mean over ranks is p - lr·mean(u(g_i)); for an
// update u that is linear in the gradient (plain SGD; weight decay adds
// the same wd·p on every rank) that is p - lr·u(mean g_i), the synchronous
// step. SGD's momentum buffer is linear too: each rank's b_i = μ·b_i + g_i
// averages to the synchronous buffer, so this holds with momentum as
// well, without averaging the buffers. The parameters must match one
// process on the whole batch, on the flat-gradient path and off it.
func TestPostLocalSGDPeriodOneIsSynchronous(t *testing.T) {
	const steps = 30
	for _, c := range []struct {
		name string
		sgd  SGDConfig
		cfg  LocalSGDConfig
		opts []DistOption
	}{
		{"plain SGD from the start", SGDConfig{LR: 0.05}, LocalSGDConfig{ModelAveragingPeriod: 1}, nil},
		{"momentum after 5 synchronous steps", localSGDLinear, LocalSGDConfig{StartLocalSGDIter: 5, ModelAveragingPeriod: 1}, nil},
		{"momentum, gradients moved", localSGDLinear, LocalSGDConfig{StartLocalSGDIter: 5, ModelAveragingPeriod: 1}, []DistOption{FlatGradients(true)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := singleLinear(t, steps, c.sgd)
			for _, n := range []int{2, 3} {
				got := localRuns(t, startRuntimes(t, n), steps, c.sgd, c.cfg, nil, c.opts...)
				for rank := range n {
					if err := closeTo(got[rank][steps-1], want, 1e-12); err != nil {
						t.Errorf("%d ranks, rank %d: %v", n, rank, err)
					}
				}
			}
		})
	}
}

// singleLinear trains the linear model in one process on the whole batch.
func singleLinear(t *testing.T, steps int, sgd SGDConfig) []float64 {
	t.Helper()
	const d, batch = 6, 24
	m := newLinear(d, 1)
	opt, err := NewSGD(m.params, sgd)
	if err != nil {
		t.Fatal(err)
	}
	for s := range steps {
		xs, ys := linearBatch(s, d, batch)
		opt.ZeroGrad()
		m.backward(xs, ys, noReady)
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
	}
	return append(m.w, m.b...)
}

// TestPostLocalSGDReplicas: the first StartLocalSGDIter steps are
// synchronous (the replicas agree, and match one process on the whole
// batch); after them the replicas, training on different data, differ
// after every step but those that end a period, right after which they
// agree exactly; local steps between averagings start no collective.
func TestPostLocalSGDReplicas(t *testing.T) {
	const n, start, period, steps = 3, 4, 3, 14
	rts := startRuntimes(t, n)
	var mu sync.Mutex
	requests := make([]int64, n)
	got := localRuns(t, rts, steps, localSGDLinear, LocalSGDConfig{StartLocalSGDIter: start, ModelAveragingPeriod: period},
		func(rank, step int, o *PostLocalSGD) error {
			mu.Lock()
			defer mu.Unlock()
			// Only this rank's own requests are counted on its runtime.
			req := rts[rank].Stats().Requests
			prev := requests[rank]
			requests[rank] = req
			local := step > start
			if o.Local() != (step >= start) {
				return fmt.Errorf("Local %v after %d steps (start %d)", o.Local(), step, start)
			}
			if o.Steps() != step {
				return fmt.Errorf("Steps %d", o.Steps())
			}
			averages := local && (step-start)%period == 0
			if o.Averaged() != (!local || averages) {
				return fmt.Errorf("Averaged %v", o.Averaged())
			}
			if local && !averages && step > 1 && req != prev {
				return fmt.Errorf("a local step without averaging enqueued %d collectives", req-prev)
			}
			if averages && req == prev {
				return errors.New("an averaging step enqueued no collective")
			}
			return nil
		})
	for s := range steps {
		step := s + 1
		synchronous := step <= start
		averaged := !synchronous && (step-start)%period == 0
		for rank := 1; rank < n; rank++ {
			diff := maxDiff(got[rank][s], got[0][s])
			switch {
			case (synchronous || averaged) && diff != 0:
				t.Errorf("step %d: rank %d differs from rank 0 by %g right after %s", step, rank, diff,
					map[bool]string{true: "a synchronous step", false: "an averaging"}[synchronous])
			case !synchronous && !averaged && diff < 1e-9:
				t.Errorf("step %d: rank %d equals rank 0 (diff %g) between averagings", step, rank, diff)
			}
		}
	}
	want := singleLinear(t, start, localSGDLinear)
	if err := closeTo(got[0][start-1], want, 1e-12); err != nil {
		t.Errorf("after the %d synchronous steps: %v", start, err)
	}
}

// startNodes starts Runtimes over an in-memory group whose ranks sit on
// the nodes nodeOf gives, with dynamic process sets.
func startNodes(t *testing.T, nodeOf []int) []*hvd.Runtime {
	t.Helper()
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	group := memcomm.NewGroupWith(len(nodeOf), memcomm.GroupOptions{NodeOf: nodeOf, Timeout: time.Minute})
	rts := make([]*hvd.Runtime, len(nodeOf))
	errs := make([]error, len(nodeOf))
	var wg sync.WaitGroup
	for i := range rts {
		rts[i] = new(hvd.Runtime)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rts[i].Init(hvd.WithCommunicator(group[i]), hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()), hvd.WithDynamicProcessSets())
		}()
	}
	wg.Wait()
	t.Cleanup(func() { hvd.StopLocal(rts) })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return rts
}

// hierarchicalRuns trains with post-local SGD averaging within each node
// every k1 steps and across all ranks every k2, and returns each rank's
// parameters after each step.
func hierarchicalRuns(t *testing.T, rts []*hvd.Runtime, start, k1, k2, steps int) [][][]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := len(rts)
	out := make([][][]float64, n)
	onRanks(t, n, func(rank int) error {
		node, err := rts[rank].AddNodeProcessSets(ctx)
		if err != nil {
			return err
		}
		nodeColl, err := FromProcessSet(rts[rank], node)
		if err != nil {
			return err
		}
		cfg := LocalSGDConfig{StartLocalSGDIter: start, ModelAveragingPeriod: k2, Hierarchy: []AveragingLevel{{Period: k1, Coll: nodeColl}}}
		got, err := localRun(ctx, rts[rank], rank, n, steps, localSGDLinear, cfg, nil)
		out[rank] = got
		return err
	})
	return out
}

// checkHierarchy checks, step by step, which replicas agree: all of them
// after a synchronous step or one that ends a global period, those of one
// node after a step that ends a node period, none otherwise.
func checkHierarchy(t *testing.T, got [][][]float64, nodeOf []int, start, k1, k2 int) {
	t.Helper()
	for s := range got[0] {
		step := s + 1
		k := step - start
		for a := range got {
			for b := a + 1; b < len(got); b++ {
				same := step <= start || k%k2 == 0 || (k%k1 == 0 && nodeOf[a] == nodeOf[b])
				diff := maxDiff(got[a][s], got[b][s])
				if same && diff != 0 {
					t.Errorf("step %d: ranks %d and %d differ by %g", step, a, b, diff)
				}
				if !same && diff < 1e-9 {
					t.Errorf("step %d: ranks %d and %d agree (diff %g), but no averaging joined them", step, a, b, diff)
				}
			}
		}
	}
}

// TestPostLocalSGDHierarchical: averaging within each node every k1 steps
// and across every rank every k2: the replicas of a node agree right
// after a node averaging, all agree right after a global one, on nodes of
// consecutive and of scattered ranks.
func TestPostLocalSGDHierarchical(t *testing.T) {
	const start, k1, k2, steps = 2, 2, 6, 15
	for _, nodeOf := range [][]int{{0, 0, 1, 1}, {0, 1, 0, 1, 0, 1}} {
		t.Run(fmt.Sprint(nodeOf), func(t *testing.T) {
			got := hierarchicalRuns(t, startNodes(t, nodeOf), start, k1, k2, steps)
			checkHierarchy(t, got, nodeOf, start, k1, k2)
		})
	}
}

// TestPostLocalSGDState: the step count travels in State: SetState on a
// fresh PostLocalSGD restores it (and the phase), BroadcastState carries
// rank 0's to every rank, and the state of a plain optimizer, or a bad
// count, is refused.
func TestPostLocalSGDState(t *testing.T) {
	const n, start = 2, 3
	rts := startRuntimes(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onRanks(t, n, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		mk := func() (*PostLocalSGD, *linear, error) {
			m := newLinear(4, 1)
			inner, err := NewSGD(m.params, localSGDLinear)
			if err != nil {
				return nil, nil, err
			}
			dist, err := NewDistributed(inner, coll, FlatGradients(false))
			if err != nil {
				return nil, nil, err
			}
			o, err := NewPostLocalSGD(dist, LocalSGDConfig{StartLocalSGDIter: start, ModelAveragingPeriod: 4})
			return o, m, err
		}
		a, m, err := mk()
		if err != nil {
			return err
		}
		// Rank 0 takes 5 steps (3 synchronous, 2 local: no averaging
		// before the 4th), rank 1 the 3 synchronous ones only.
		steps := 5 - 2*rank
		for range steps {
			m.gw()[0] = 1
			if err := a.StepContext(ctx); err != nil {
				return err
			}
		}
		s := a.State()
		plain := a.dist.inner.State()
		if err := a.Close(); err != nil { // b holds the same names
			return err
		}
		if s.Scalars[localSGDStepKey] != float64(steps) || s.Kind != "sgd" {
			return fmt.Errorf("state %s, step scalar %v, want %d", s.Kind, s.Scalars[localSGDStepKey], steps)
		}
		b, _, err := mk()
		if err != nil {
			return err
		}
		defer b.Close()
		if err := b.SetState(s); err != nil {
			return err
		}
		if b.Steps() != steps || b.Local() != (steps >= start) || !slices.Equal(b.State().Tensors[SlotKey("w", "momentum")].Float64s(), s.Tensors[SlotKey("w", "momentum")].Float64s()) {
			return fmt.Errorf("after SetState: %d steps, local %v", b.Steps(), b.Local())
		}
		if err := BroadcastState(ctx, coll, b, 0); err != nil {
			return err
		}
		if b.Steps() != 5 || !b.Local() {
			return fmt.Errorf("after BroadcastState from rank 0: %d steps, local %v; want 5, true", b.Steps(), b.Local())
		}
		if err := b.SetState(plain); !errors.Is(err, ErrState) {
			return fmt.Errorf("SetState of a plain SGD state: %v, want ErrState", err)
		}
		bad := a.State()
		bad.Scalars[localSGDStepKey] = 1.5
		if err := b.SetState(bad); !errors.Is(err, ErrState) {
			return fmt.Errorf("SetState with step 1.5: %v, want ErrState", err)
		}
		if b.Steps() != 5 {
			return fmt.Errorf("a refused SetState changed the step count to %d", b.Steps())
		}
		return nil
	})
}

// TestPostLocalSGDLR: the learning rate passes through to the wrapped
// optimizer, and Ready in the local phase checks the name.
func TestPostLocalSGDLR(t *testing.T) {
	rts := startRuntimes(t, 1)
	coll, err := FromRuntime(rts[0])
	if err != nil {
		t.Fatal(err)
	}
	m := newLinear(3, 1)
	inner, err := NewSGD(m.params, SGDConfig{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	dist, err := NewDistributed(inner, coll)
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewPostLocalSGD(dist, LocalSGDConfig{ModelAveragingPeriod: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	o.SetLR(0.25)
	if o.LR() != 0.25 || inner.LR() != 0.25 {
		t.Errorf("LR %g, inner %g after SetLR(0.25)", o.LR(), inner.LR())
	}
	if err := o.GradReady("nope"); !errors.Is(err, ErrUnknownParam) {
		t.Errorf("Ready of an unknown parameter: %v", err)
	}
	if err := o.Ready(m.params[0]); err != nil {
		t.Errorf("Ready in the local phase: %v", err)
	}
	if o.Unwrap() != Optimizer(dist) || len(o.Params()) != 2 {
		t.Errorf("Unwrap or Params do not pass through")
	}
}

// TestLocalSGDErrors: bad settings are refused with ErrAveraging.
func TestLocalSGDErrors(t *testing.T) {
	rts := startRuntimes(t, 1)
	coll, err := FromRuntime(rts[0])
	if err != nil {
		t.Fatal(err)
	}
	m := newLinear(3, 1)
	inner, err := NewSGD(m.params, SGDConfig{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	dist, err := NewDistributed(inner, coll)
	if err != nil {
		t.Fatal(err)
	}
	defer dist.Close()
	for _, c := range []struct {
		name string
		dist *DistributedOptimizer
		cfg  LocalSGDConfig
	}{
		{"nil optimizer", nil, LocalSGDConfig{ModelAveragingPeriod: 1}},
		{"negative start", dist, LocalSGDConfig{StartLocalSGDIter: -1, ModelAveragingPeriod: 1}},
		{"period 0", dist, LocalSGDConfig{}},
		{"node period 0", dist, LocalSGDConfig{ModelAveragingPeriod: 4, Hierarchy: []AveragingLevel{{Period: 0, Coll: coll}}}},
		{"global period not a multiple", dist, LocalSGDConfig{ModelAveragingPeriod: 6, Hierarchy: []AveragingLevel{{Period: 4, Coll: coll}}}},
		{"global period equal to the node's", dist, LocalSGDConfig{ModelAveragingPeriod: 4, Hierarchy: []AveragingLevel{{Period: 4, Coll: coll}}}},
		{"node level without Collectives", dist, LocalSGDConfig{ModelAveragingPeriod: 4, Hierarchy: []AveragingLevel{{Period: 2}}}},
	} {
		if _, err := NewPostLocalSGD(c.dist, c.cfg); !errors.Is(err, ErrAveraging) {
			t.Errorf("%s: %v, want ErrAveraging", c.name, err)
		}
	}
	for _, c := range []struct {
		name   string
		levels []AveragingLevel
		opts   []AveragerOption
	}{
		{"no level", nil, nil},
		{"period 0", []AveragingLevel{{Period: 0, Coll: coll}}, nil},
		{"nil Collectives", []AveragingLevel{{Period: 1}}, nil},
		{"descending", []AveragingLevel{{Period: 4, Coll: coll}, {Period: 2, Coll: coll}}, nil},
		{"negative warmup", []AveragingLevel{{Period: 2, Coll: coll}}, []AveragerOption{WarmupSteps(-1)}},
	} {
		if _, err := NewHierarchicalAverager(m.params, c.levels, c.opts...); !errors.Is(err, ErrAveraging) {
			t.Errorf("averager, %s: %v, want ErrAveraging", c.name, err)
		}
	}
	if _, err := NewModelAverager(coll, nil, 1); !errors.Is(err, ErrParams) {
		t.Errorf("averager without parameters: %v, want ErrParams", err)
	}
}

// TestModelAveragerDue: which steps average, at which level.
func TestModelAveragerDue(t *testing.T) {
	coll := fakeSize(4)
	m := newLinear(2, 1)
	a, err := NewHierarchicalAverager(m.params, []AveragingLevel{{Period: 2, Coll: coll}, {Period: 6, Coll: coll}}, WarmupSteps(3))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for step := 0; step <= 16; step++ {
		got = append(got, a.Due(step))
	}
	// steps 0..3: warmup; then k = step-3: level 0 at even k, 1 at k%6 == 0.
	want := []int{-1, -1, -1, -1, -1, 0, -1, 0, -1, 1, -1, 0, -1, 0, -1, 1, -1}
	if !slices.Equal(got, want) {
		t.Errorf("Due over steps 0..16: %v, want %v", got, want)
	}
}

// fakeSize is a Collectives of a given size that starts nothing.
type fakeSize int

func (f fakeSize) Size() int { return int(f) }
func (fakeSize) AllreduceAsync(*tensor.Tensor, string, tensor.ReduceOp, float64, float64) (Waiter, error) {
	return nil, errors.New("fakeSize starts nothing")
}
func (fakeSize) BroadcastAsync(*tensor.Tensor, int, string) (Waiter, error) {
	return nil, errors.New("fakeSize starts nothing")
}

// TestModelAveragerState: with AverageState the optimizers' momentum
// buffers agree after an averaging (they differ before: each rank stepped
// on its own gradient), and the parameters are the mean of the ranks'.
func TestModelAveragerState(t *testing.T) {
	const n = 3
	rts := startRuntimes(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bufs := make([][]float64, n)
	params := make([][]float64, n)
	onRanks(t, n, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		m := newLinear(3, 1)
		opt, err := NewSGD(m.params, localSGDLinear)
		if err != nil {
			return err
		}
		avg, err := NewModelAverager(coll, m.params, 2, AverageState(opt))
		if err != nil {
			return err
		}
		for step := 1; step <= 2; step++ {
			opt.ZeroGrad()
			m.gw()[0] = float64(rank + step)
			if err := opt.Step(); err != nil {
				return err
			}
			if err := avg.Average(ctx, step); err != nil {
				return err
			}
		}
		bufs[rank] = opt.State().Tensors[SlotKey("w", "momentum")].Float64s()
		params[rank] = slices.Clone(m.w)
		return nil
	})
	for rank := 1; rank < n; rank++ {
		if !slices.Equal(bufs[rank], bufs[0]) || !slices.Equal(params[rank], params[0]) {
			t.Errorf("rank %d: momentum %v, w %v; rank 0: %v, %v", rank, bufs[rank], params[rank], bufs[0], params[0])
		}
	}
	// Each rank's momentum for w[0] after two steps from zero with
	// gradients g1 = rank+1, g2 = rank+2 (weight decay aside): 0.9·g1+g2.
	mean := 0.0
	for rank := range n {
		mean += 0.9*float64(rank+1) + float64(rank+2)
	}
	mean /= n
	if math.Abs(bufs[0][0]-mean) > 1e-2 {
		t.Errorf("averaged momentum %g, want about %g", bufs[0][0], mean)
	}
}

// TestPostLocalSGDCancelledAveraging: a local step whose averaging is
// cancelled has stepped; the next Step finishes the averaging without
// stepping again, and training ends where it ends without the
// cancellation.
func TestPostLocalSGDCancelledAveraging(t *testing.T) {
	const n, period, steps, cut = 2, 2, 6, 4
	cfg := LocalSGDConfig{ModelAveragingPeriod: period}
	want := localRuns(t, startRuntimes(t, n), steps, localSGDLinear, cfg, nil)
	rts := startRuntimes(t, n)
	const d, batch = 6, 24
	cancelled := make(chan struct{})
	got := make([][]float64, n)
	onRanks(t, n, func(rank int) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		m := newLinear(d, uint64(rank)+1)
		if err := BroadcastParameters(ctx, coll, m.params, 0); err != nil {
			return err
		}
		inner, err := NewSGD(m.params, localSGDLinear)
		if err != nil {
			return err
		}
		dist, err := NewDistributed(inner, coll)
		if err != nil {
			return err
		}
		o, err := NewPostLocalSGD(dist, cfg)
		if err != nil {
			return err
		}
		defer o.Close()
		per := batch / n
		for s := range steps {
			xs, ys := linearBatch(s, d, batch)
			if err := o.ZeroGrad(); err != nil {
				return err
			}
			if err := m.backward(xs[rank*per*d:(rank+1)*per*d], ys[rank*per:(rank+1)*per], o.Ready); err != nil {
				return err
			}
			switch {
			case s+1 == cut && rank == 0:
				done, stop := context.WithCancel(ctx)
				stop()
				err := o.StepContext(done)
				close(cancelled)
				if !errors.Is(err, context.Canceled) {
					return fmt.Errorf("cancelled averaging: %v", err)
				}
				if o.Steps() != cut {
					return fmt.Errorf("%d steps after the cancelled one, want %d", o.Steps(), cut)
				}
				if err := o.Step(); err != nil { // finishes the averaging only
					return err
				}
				if o.Steps() != cut || !o.Averaged() {
					return fmt.Errorf("after finishing: %d steps (want %d), averaged %v", o.Steps(), cut, o.Averaged())
				}
			case s+1 == cut:
				<-cancelled // rank 0's averaging is started, and its wait abandoned
				if err := o.StepContext(ctx); err != nil {
					return err
				}
			default:
				if err := o.StepContext(ctx); err != nil {
					return err
				}
			}
		}
		got[rank] = append(slices.Clone(m.w), m.b...)
		return nil
	})
	for rank := range n {
		if err := closeTo(got[rank], want[rank][steps-1], 0); err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
	}
}
