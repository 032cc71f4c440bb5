package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// psgdShapes is the model of the PowerSGD tests: matrices of both dtypes,
// a conv-like weight (rows 16, cols 27), a tiny matrix and vectors.
var psgdShapes = []struct {
	name  string
	dt    tensor.DType
	shape []int
}{
	{"fc1.weight", tensor.Float32, []int{64, 32}},
	{"fc1.bias", tensor.Float32, []int{32}},
	{"conv.weight", tensor.Float64, []int{16, 3, 3, 3}},
	{"tiny", tensor.Float64, []int{4, 4}},
	{"fc2.weight", tensor.Float64, []int{10, 64}},
	{"fc2.bias", tensor.Float64, []int{10}},
}

func psgdParams() []Param {
	ps := make([]Param, len(psgdShapes))
	for i, s := range psgdShapes {
		ps[i] = Param{Name: s.name, Value: tensor.New(s.dt, s.shape...), Grad: tensor.New(s.dt, s.shape...)}
	}
	return ps
}

// psgdGrad is rank's gradient of parameter i at step.
func psgdGrad(rank, step, i int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(rank*1000+step), uint64(i)))
	n := 1
	for _, d := range psgdShapes[i].shape {
		n *= d
	}
	g := make([]float64, n)
	for k := range g {
		g[k] = rng.NormFloat64()
	}
	return g
}

// psgdMean is the mean over size ranks of parameter i's gradient at step.
func psgdMean(size, step, i int) []float64 {
	var mean []float64
	for r := range size {
		g := psgdGrad(r, step, i)
		if mean == nil {
			mean = make([]float64, len(g))
		}
		for k, v := range g {
			mean[k] += v / float64(size)
		}
	}
	return mean
}

// psgdStep runs one step of rank: the gradients written and reported in
// backward order, Synchronize, check (if any) on the synchronized
// gradients, then the wrapped optimizer's step.
func psgdStep(ctx context.Context, opt *DistributedOptimizer, rank, step int, check func() error) error {
	if err := opt.ZeroGrad(); err != nil {
		return err
	}
	ps := opt.Params()
	for i := len(ps) - 1; i >= 0; i-- {
		setFloat64s(ps[i].Grad, psgdGrad(rank, step, i))
		if err := opt.Ready(ps[i]); err != nil {
			return err
		}
	}
	if err := opt.Synchronize(ctx); err != nil {
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
	return opt.Unwrap().Step()
}

// newPSGD wraps an SGD with momentum over psgdParams in a
// DistributedOptimizer with a PowerSGD hook of cfg.
func newPSGD(coll Collectives, cfg PowerSGDConfig, opts ...DistOption) (*DistributedOptimizer, *PowerSGD, error) {
	h, err := NewPowerSGD(cfg)
	if err != nil {
		return nil, nil, err
	}
	sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.01, Momentum: 0.9})
	if err != nil {
		return nil, nil, err
	}
	opt, err := NewDistributed(sgd, coll, append([]DistOption{WithCommHook(h)}, opts...)...)
	return opt, h, err
}

// gradsMatchMean checks that every gradient of opt is the mean over size
// ranks of step's, within tol (times 100 for float32).
func gradsMatchMean(opt *DistributedOptimizer, size, step int, tol float64) error {
	for i, p := range opt.Params() {
		want := psgdMean(size, step, i)
		tl := tol
		if p.Grad.DType() == tensor.Float32 {
			tl = math.Max(tol, 1e-3)
		}
		for k, v := range asFloat64s(p.Grad) {
			if math.Abs(v-want[k]) > tl {
				return fmt.Errorf("%s[%d] = %g, want the mean %g", p.Name, k, v, want[k])
			}
		}
	}
	return nil
}

// TestPowerSGDFullRank: at rank >= min(rows, cols), with every matrix
// compressed, PowerSGD's approximation of the mean is the mean (with or
// without warm start), over the in-memory group and over the runtime
// (hvd.StartLocal); Q persists only with warm start.
func TestPowerSGDFullRank(t *testing.T) {
	const n, steps = 3, 4
	for _, c := range []struct {
		name   string
		colls  func() []Collectives
		noWarm bool
	}{
		{"group", func() []Collectives { return groupColls(n) }, false},
		{"group-nowarm", func() []Collectives { return groupColls(n) }, true},
		{"runtime", func() []Collectives { return runtimeCollsN(t, n) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			colls := c.colls()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			onRanks(t, n, func(rank int) error {
				opt, h, err := newPSGD(colls[rank], PowerSGDConfig{MatrixApproximationRank: 64, MinCompressionRate: 1e-9,
					StartPowerSGDIter: 1, NoWarmStart: c.noWarm})
				if err != nil {
					return err
				}
				defer opt.Close()
				var lastQ *tensor.Tensor
				for s := range steps {
					if err := psgdStep(ctx, opt, rank, s, func() error { return gradsMatchMean(opt, n, s, 1e-9) }); err != nil {
						return err
					}
					st := h.HookState()
					q, ok := st.Tensors[SlotKey("fc2.weight", "powersgd.q")]
					switch {
					case s == 0 && len(st.Tensors) != 0:
						return fmt.Errorf("warm-up step left PowerSGD state %v", st.Names())
					case s > 0 && ok == c.noWarm:
						return fmt.Errorf("step %d: Q kept %v with NoWarmStart %v", s, ok, c.noWarm)
					case s > 0 && st.Tensors[SlotKey("fc2.weight", "powersgd.error")] == nil:
						return fmt.Errorf("step %d: no residual", s)
					case ok && lastQ != nil && slices.Equal(q.Float64s(), lastQ.Float64s()):
						return fmt.Errorf("step %d: Q did not change", s)
					}
					lastQ = q
				}
				return nil
			})
		})
	}
}

func groupColls(n int) []Collectives {
	g := newGroup(n)
	cs := make([]Collectives, n)
	for r := range n {
		cs[r] = member{g, r}
	}
	return cs
}

func runtimeCollsN(t *testing.T, n int) []Collectives {
	rts := startRuntimes(t, n)
	cs := make([]Collectives, n)
	for i, r := range rts {
		c, err := FromRuntime(r)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return cs
}

// counting counts the bytes and names a Collectives allreduces.
type counting struct {
	Collectives
	mu    sync.Mutex
	bytes int64
	names []string
}

func (c *counting) AllreduceAsync(t *tensor.Tensor, name string, op tensor.ReduceOp, pre, post float64) (Waiter, error) {
	c.mu.Lock()
	c.bytes += int64(t.NumBytes())
	c.names = append(c.names, name)
	c.mu.Unlock()
	return c.Collectives.AllreduceAsync(t, name, op, pre, post)
}

// take returns and resets the counts.
func (c *counting) take() (int64, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, n := c.bytes, c.names
	c.bytes, c.names = 0, nil
	slices.Sort(n)
	return b, n
}

// TestPowerSGDWireBytes: the bytes allreduced per step are the gradients'
// during warm-up, then Σ (rows+cols)·r·elemsize over the compressed
// matrices plus the others' bytes; the names are the same every step;
// and a step after the start is not the exact mean (r=2 compresses).
func TestPowerSGDWireBytes(t *testing.T) {
	const n, steps, start, r = 2, 4, 2, 2
	var all, want int64
	for _, s := range psgdShapes {
		b := int64(tensor.New(s.dt, s.shape...).NumBytes())
		all += b
		rows, cols, ok := matrixShape(s.shape)
		rk := min(r, rows, cols)
		if ok && float64(rows*cols) > 2*float64((rows+cols)*rk) {
			want += int64((rows + cols) * rk * s.dt.Size())
		} else {
			want += b
		}
	}
	// fc1.weight (64+32)·2·4, conv.weight (16+27)·2·8, fc2.weight
	// (10+64)·2·8 compressed; tiny (16/16 < 2) and the biases not.
	if w := int64(96*2*4 + 43*2*8 + 74*2*8 + 16*8 + 32*4 + 10*8); want != w {
		t.Fatalf("formula %d, hand count %d", want, w)
	}
	g := newGroup(n)
	cs := []*counting{{Collectives: member{g, 0}}, {Collectives: member{g, 1}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onRanks(t, n, func(rank int) error {
		opt, h, err := newPSGD(cs[rank], PowerSGDConfig{MatrixApproximationRank: r, StartPowerSGDIter: start}, BucketBytes(4<<10))
		if err != nil {
			return err
		}
		var names []string
		for s := range steps {
			exact := gradsMatchMean(opt, n, s, 1e-9)
			err := psgdStep(ctx, opt, rank, s, func() error { exact = gradsMatchMean(opt, n, s, 1e-9); return nil })
			if err != nil {
				return err
			}
			b, ns := cs[rank].take()
			switch {
			case s < start && b != all:
				return fmt.Errorf("warm-up step %d: %d bytes allreduced, want all %d", s, b, all)
			case s < start && exact != nil:
				return fmt.Errorf("warm-up step %d: %v", s, exact)
			case s >= start && b != want:
				return fmt.Errorf("step %d: %d bytes allreduced, want %d", s, b, want)
			case s >= start && exact == nil:
				return fmt.Errorf("step %d: rank-%d PowerSGD gave the exact mean", s, r)
			case s > start && !slices.Equal(ns, names):
				return fmt.Errorf("step %d: names %q, step before %q", s, ns, names)
			}
			names = ns
		}
		if got := h.BytesAllreduced(); got != start*all+(steps-start)*want {
			return fmt.Errorf("BytesAllreduced %d, want %d", got, start*all+(steps-start)*want)
		}
		for _, name := range names {
			if !strings.Contains(name, ".powersgd.") {
				return fmt.Errorf("name %q", name)
			}
		}
		return nil
	})
}

// TestPowerSGDErrorFeedback: with error feedback nothing is lost, only
// delayed: the approximations' errors summed over the steps, Σ (A_t −
// mean_t), are exactly minus the mean of the ranks' final residuals
// (telescoping: A_t − mean_t = ē_t − ē_{t+1}), and smaller than without.
func TestPowerSGDErrorFeedback(t *testing.T) {
	const n, steps, i = 2, 12, 4 // i: fc2.weight
	drift := func(noEF bool) (float64, float64) {
		colls := groupColls(n)
		sum := make([]float64, 640)
		resid := make([][]float64, n)
		onRanks(t, n, func(rank int) error {
			opt, h, err := newPSGD(colls[rank], PowerSGDConfig{MatrixApproximationRank: 1, NoErrorFeedback: noEF})
			if err != nil {
				return err
			}
			for s := range steps {
				err := psgdStep(context.Background(), opt, rank, s, func() error {
					if rank == 0 {
						for k, v := range asFloat64s(opt.Params()[i].Grad) {
							sum[k] += v - psgdMean(n, s, i)[k]
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			if e := h.HookState().Tensors[SlotKey("fc2.weight", "powersgd.error")]; e != nil {
				resid[rank] = e.Float64s()
			}
			return nil
		})
		var norm, gap float64
		for k, v := range sum {
			norm += v * v
			if !noEF {
				g := v + (resid[0][k]+resid[1][k])/n
				gap = math.Max(gap, math.Abs(g))
			}
		}
		return math.Sqrt(norm), gap
	}
	with, gap := drift(false)
	without, _ := drift(true)
	if gap > 1e-9 {
		t.Fatalf("error feedback: Σ(A−mean) + mean residual = %g, want 0", gap)
	}
	if !(with < without) {
		t.Fatalf("error feedback: accumulated error %.3g, without %.3g", with, without)
	}
}

// TestPowerSGDStateRestore: the optimizer's State after some steps
// (residuals, Qs, the step count, the momentum) restored into fresh
// optimizers and hooks reproduces the next steps exactly; BroadcastState
// carries the hook's state.
func TestPowerSGDStateRestore(t *testing.T) {
	const n, cut, steps = 2, 3, 6
	cfg := PowerSGDConfig{MatrixApproximationRank: 1, StartPowerSGDIter: 1, Seed: 7}
	states := make([]*State, n)
	values := make([][][]byte, n)
	want := make([][][]byte, n)
	colls := runtimeCollsN(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onRanks(t, n, func(rank int) error {
		opt, _, err := newPSGD(colls[rank], cfg)
		if err != nil {
			return err
		}
		defer opt.Close()
		for s := range steps {
			if s == cut {
				states[rank], values[rank] = opt.State(), snapshotValues(opt.Params())
			}
			if err := psgdStep(ctx, opt, rank, s, nil); err != nil {
				return err
			}
		}
		want[rank] = snapshotValues(opt.Params())
		st := states[rank]
		if st.Scalars["powersgd.step"] != cut || st.Tensors[SlotKey("fc1.weight", "powersgd.q")] == nil ||
			st.Tensors[SlotKey("fc1.weight", "powersgd.error")] == nil || st.Tensors[SlotKey("fc1.weight", "momentum")] == nil {
			return fmt.Errorf("state at step %d: scalars %v, tensors %v", cut, st.Scalars, st.Names())
		}
		return nil
	})
	for _, restore := range []bool{true, false} {
		got := make([][][]byte, n)
		onRanks(t, n, func(rank int) error {
			opt, _, err := newPSGD(colls[rank], cfg)
			if err != nil {
				return err
			}
			defer opt.Close()
			for i, p := range opt.Params() {
				copy(p.Value.Bytes(), values[rank][i])
			}
			if restore {
				if err := opt.SetState(states[rank]); err != nil {
					return err
				}
			} else { // only the wrapped optimizer's state and the step
				st := states[rank].Clone()
				for k := range st.Tensors {
					if strings.Contains(k, "powersgd.") {
						delete(st.Tensors, k)
					}
				}
				if err := opt.SetState(st); err != nil {
					return err
				}
			}
			for s := cut; s < steps; s++ {
				if err := psgdStep(ctx, opt, rank, s, nil); err != nil {
					return err
				}
			}
			got[rank] = snapshotValues(opt.Params())
			// BroadcastState: every rank ends with rank 0's state.
			if err := BroadcastState(ctx, colls[rank], opt, 0); err != nil {
				return err
			}
			if st := opt.State(); st.Scalars["powersgd.step"] != steps || len(st.Tensors) != len(states[rank].Tensors) {
				return fmt.Errorf("after BroadcastState: step %v, %d tensors", st.Scalars["powersgd.step"], len(st.Tensors))
			}
			return nil
		})
		for r := range n {
			if same := slices.EqualFunc(got[r], want[r], slices.Equal); same != restore {
				t.Fatalf("rank %d, hook state restored %v: parameters equal to the uninterrupted run's: %v", r, restore, same)
			}
		}
	}
}

func snapshotValues(ps []Param) [][]byte {
	out := make([][]byte, len(ps))
	for i, p := range ps {
		out[i] = slices.Clone(p.Value.Bytes())
	}
	return out
}

// doubling is a user hook: it allreduces each bucket with AllreduceHook,
// in a goroutine that waits for release first, and doubles the result in
// Finish; it records what it saw.
type doubling struct {
	release chan struct{}
	mu      sync.Mutex
	starts  []string
	finish  int
	steps   []int
}

func (h *doubling) Start(c Collectives, b *Bucket) (Waiter, error) {
	h.mu.Lock()
	h.starts = append(h.starts, fmt.Sprintf("%d:%s:%d", b.Index, b.Name, len(b.Grads)))
	h.steps = append(h.steps, b.Step)
	h.mu.Unlock()
	return Async(func() error {
		if h.release != nil {
			<-h.release
		}
		w, err := AllreduceHook().Start(c, b)
		if err != nil {
			return err
		}
		return w.Wait(context.Background())
	}), nil
}

func (h *doubling) Finish(b *Bucket) error {
	h.mu.Lock()
	h.finish++
	h.mu.Unlock()
	for _, g := range b.Grads {
		v := asFloat64s(g)
		for k := range v {
			v[k] *= 2
		}
		setFloat64s(g, v)
	}
	return nil
}

// TestCommHookCustom: a user's hook gets the buckets (by BucketBytes, in
// backward order, stable names), the step, and its Finish result is what
// the optimizer steps with; a cancelled Synchronize leaves the hook's
// work in flight (ZeroGrad refuses) and the next finishes it without
// starting again.
func TestCommHookCustom(t *testing.T) {
	const n = 2
	colls := groupColls(n)
	hooks := []*doubling{{release: make(chan struct{})}, {release: make(chan struct{})}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onRanks(t, n, func(rank int) error {
		sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.1})
		if err != nil {
			return err
		}
		h := hooks[rank]
		opt, err := NewDistributed(sgd, colls[rank], WithCommHook(h), BucketBytes(8<<10))
		if err != nil {
			return err
		}
		ps := opt.Params()
		for i := len(ps) - 1; i >= 0; i-- {
			setFloat64s(ps[i].Grad, psgdGrad(rank, 0, i))
			if err := opt.Ready(ps[i]); err != nil {
				return err
			}
		}
		short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
		defer stop()
		if err := opt.Synchronize(short); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("Synchronize before the hook was released: %v", err)
		}
		if err := opt.ZeroGrad(); !errors.Is(err, ErrInFlight) {
			return fmt.Errorf("ZeroGrad after a cancelled Synchronize: %v", err)
		}
		close(h.release)
		if err := opt.Synchronize(ctx); err != nil {
			return err
		}
		for i, p := range ps {
			mean := psgdMean(n, 0, i)
			for k, v := range asFloat64s(p.Grad) {
				if math.Abs(v-2*mean[k]) > 1e-5 {
					return fmt.Errorf("%s[%d] = %g, want twice the mean %g", p.Name, k, v, 2*mean[k])
				}
			}
		}
		// Buckets of at most 8 KiB in backward order: fc2.bias, fc2.weight
		// and tiny (5,328 B); conv.weight and fc1.bias (3,584 B);
		// fc1.weight (8,192 B).
		want := []string{"0:group.fc2.bias:3", "1:group.conv.weight:2", "2:fc1.weight:1"}
		if h.finish != 3 || !slices.Equal(h.starts, want) {
			return fmt.Errorf("hook saw starts %q and %d finishes, want %q and 3", h.starts, h.finish, want)
		}
		if err := psgdStep(ctx, opt, rank, 1, nil); err != nil {
			return err
		}
		if !slices.Equal(h.steps, []int{0, 0, 0, 1, 1, 1}) {
			return fmt.Errorf("steps seen %v", h.steps)
		}
		return nil
	})
}

// TestCommHookBuiltins: WithCommHook(AllreduceHook()) and
// CompressionHook(FP16) are the optimizer's own paths (WithCompression),
// and their Start/Finish, wrapped in a user's hook, give the same result.
func TestCommHookBuiltins(t *testing.T) {
	const n = 2
	for _, c := range []struct {
		name string
		comp Compression
		tol  float64
	}{
		{"allreduce", NoCompression, 1e-9},
		{"fp16", FP16, 0.01},
		{"bf16", BF16, 0.05},
	} {
		t.Run(c.name, func(t *testing.T) {
			colls := groupColls(n)
			onRanks(t, n, func(rank int) error {
				for k, opts := range [][]DistOption{{WithCommHook(CompressionHook(c.comp))}, {WithCommHook(wrapped{CompressionHook(c.comp)})}} {
					sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.1})
					if err != nil {
						return err
					}
					opt, err := NewDistributed(sgd, colls[rank], opts...)
					if err != nil {
						return err
					}
					if own := k == 0; (opt.cfg.hook == nil) != own {
						return fmt.Errorf("options %d: hook %v", k, opt.cfg.hook)
					}
					if err := psgdStep(context.Background(), opt, rank, 0, func() error { return gradsMatchMean(opt, n, 0, c.tol) }); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	var cfg distConfig
	WithCommHook(CompressionHook(BF16))(&cfg)
	if cfg.comp != BF16 || cfg.hook != nil {
		t.Fatalf("WithCommHook(CompressionHook(BF16)): %+v", cfg)
	}
	WithCommHook(AllreduceHook())(&cfg)
	if cfg.comp != NoCompression || cfg.hook != nil {
		t.Fatalf("WithCommHook(AllreduceHook()): %+v", cfg)
	}
	h, _ := NewPowerSGD(PowerSGDConfig{})
	WithCommHook(h)(&cfg)
	WithCompression(FP16)(&cfg)
	if cfg.comp != FP16 || cfg.hook != nil {
		t.Fatalf("WithCompression after WithCommHook: %+v", cfg)
	}
}

// wrapped hides a built-in hook's type from the optimizer, so that its
// Start and Finish run as a user's hook's would.
type wrapped struct{ CommHook }

// TestPowerSGDErrors: bad configurations, ops, states.
func TestPowerSGDErrors(t *testing.T) {
	for _, cfg := range []PowerSGDConfig{
		{MatrixApproximationRank: -1}, {StartPowerSGDIter: -1}, {MinCompressionRate: -1},
		{MinCompressionRate: math.Inf(1)}, {OrthogonalizationEpsilon: math.NaN()},
	} {
		if _, err := NewPowerSGD(cfg); err == nil {
			t.Errorf("NewPowerSGD(%+v) succeeded", cfg)
		}
	}
	h, err := NewPowerSGD(PowerSGDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if c := h.Config(); c.MatrixApproximationRank != 1 || c.MinCompressionRate != 2 {
		t.Fatalf("defaults %+v", c)
	}
	coll := member{newGroup(1), 0}
	for _, op := range []tensor.ReduceOp{Sum, Adasum} {
		sgd, _ := NewSGD(psgdParams(), SGDConfig{LR: 0.1})
		if _, err := NewDistributed(sgd, coll, WithCommHook(h), WithOp(op)); err == nil || !strings.Contains(err.Error(), "Average") {
			t.Errorf("PowerSGD with op %v: %v", op, err)
		}
	}
	opt, _, err := newPSGD(coll, PowerSGDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := psgdStep(context.Background(), opt, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	good := opt.State()
	for name, mod := range map[string]func(s *State){
		"no step":     func(s *State) { delete(s.Scalars, "powersgd.step") },
		"bad step":    func(s *State) { s.Scalars["powersgd.step"] = 1.5 },
		"bad scalar":  func(s *State) { s.Scalars["powersgd.x"] = 1 },
		"bad slot":    func(s *State) { s.Tensors[SlotKey("fc1.weight", "powersgd.x")] = tensor.New(tensor.Float32, 1) },
		"inner wrong": func(s *State) { delete(s.Tensors, SlotKey("fc1.weight", "momentum")) },
	} {
		s := good.Clone()
		mod(s)
		if err := opt.SetState(s); !errors.Is(err, ErrState) {
			t.Errorf("%s: SetState: %v", name, err)
		}
	}
	if err := opt.SetState(good); err != nil {
		t.Fatal(err)
	}
	// SetState in the middle of a step.
	if err := opt.Ready(opt.Params()[0]); err != nil {
		t.Fatal(err)
	}
	if err := opt.SetState(good); !errors.Is(err, ErrInFlight) {
		t.Fatalf("SetState during a step: %v", err)
	}
}

// TestPowerSGDMinCompressionRate: a matrix is compressed only when its
// compression rate, rows·cols / ((rows+cols)·rank), is above
// MinCompressionRate, as torch's _should_compress decides: 8×8 at rank 2
// (rate exactly 2) travels as it is, 9×9 (2.25) is compressed, and a
// 3×40 matrix at rank 8, approximated at rank 3 (rate 120/129), only
// with a minimum rate below that.
func TestPowerSGDMinCompressionRate(t *testing.T) {
	for _, c := range []struct {
		shape      []int
		rank       int
		rate       float64
		compressed bool
	}{
		{[]int{8, 8}, 2, 0, false},
		{[]int{9, 9}, 2, 0, true},
		{[]int{8, 8}, 2, 1.99, true},
		{[]int{3, 40}, 8, 0, false},
		{[]int{3, 40}, 8, 0.9, true},
		{[]int{40}, 1, 1e-9, false},
		{[]int{4, 3, 3, 3}, 1, 0, true}, // conv weight: 4×27, rate 108/31
	} {
		h, err := NewPowerSGD(PowerSGDConfig{MatrixApproximationRank: c.rank, MinCompressionRate: c.rate})
		if err != nil {
			t.Fatal(err)
		}
		g := tensor.New(tensor.Float32, c.shape...)
		pl := h.plan(&Bucket{Name: "b", Params: []Param{{Name: "w", Value: g, Grad: g}}, Grads: []*tensor.Tensor{g}})
		if got := len(pl.lanes[0].comp) == 1; got != c.compressed {
			t.Errorf("%v at rank %d, minimum rate %g: compressed %v, want %v", c.shape, c.rank, c.rate, got, c.compressed)
		}
	}
}

// TestPowerSGDOrthogonalize: the columns come out orthonormal; a zero
// column, and one that is a multiple of an earlier one (a gradient of
// lower rank than the approximation), come out zero.
func TestPowerSGDOrthogonalize(t *testing.T) {
	p := []float64{1, 3, 0, 4, 2, 1, 5, 4, 0, 0, 0, 0, 0.3, 0.9, 0, 1.2} // 4 vectors of 4
	orthogonalize(p, 4, 4, 0)
	for i := range 4 {
		for j := range 4 {
			var dot float64
			for r := range 4 {
				dot += p[i*4+r] * p[j*4+r]
			}
			want := 0.0
			if i == j && i < 2 {
				want = 1
			}
			if math.Abs(dot-want) > 1e-12 {
				t.Fatalf("column %d · column %d = %g, want %g", i, j, dot, want)
			}
		}
	}
}

// failing is a hook whose Start or Finish fails while fail is set.
type failing struct {
	fail       string
	started    int
	finishedOK int
}

func (h *failing) Start(c Collectives, b *Bucket) (Waiter, error) {
	h.started++
	if h.fail == "start" {
		return nil, errors.New("start refused")
	}
	return AllreduceHook().Start(c, b)
}

func (h *failing) Finish(b *Bucket) error {
	if h.fail == "finish" {
		return errors.New("finish refused")
	}
	h.finishedOK++
	return nil
}

// TestCommHookErrors: a hook's Start or Finish failure is the step's
// error, names the bucket, does not count the step (Bucket.Step), and the
// next step starts afresh.
func TestCommHookErrors(t *testing.T) {
	h := &failing{}
	sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	opt, err := NewDistributed(sgd, member{newGroup(1), 0}, WithCommHook(h), NumGroups(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, fail := range []string{"start", "finish"} {
		h.fail = fail
		err := psgdStep(context.Background(), opt, 0, 0, nil)
		if err == nil || !strings.Contains(err.Error(), fail+" refused") || !strings.Contains(err.Error(), `"group.fc2.bias"`) {
			t.Fatalf("%s failing: %v", fail, err)
		}
		if fail == "start" { // Ready failed: Synchronize ends the step, with the error
			if err := opt.Synchronize(context.Background()); err == nil || !strings.Contains(err.Error(), "start refused") {
				t.Fatalf("Synchronize after a failed Start: %v", err)
			}
		}
	}
	h.fail = ""
	if err := psgdStep(context.Background(), opt, 0, 0, nil); err != nil {
		t.Fatal(err)
	}
	if h.started != 3 || h.finishedOK != 1 || opt.steps != 1 {
		t.Fatalf("%d starts, %d finishes, %d steps counted", h.started, h.finishedOK, opt.steps)
	}
}
