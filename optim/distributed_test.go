package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/tensor"
)

// group is an in-memory Collectives for n ranks in one process: a
// collective completes, in the goroutine of the last rank to start it, once
// every rank has started the same name.
type group struct {
	n       int
	mu      sync.Mutex
	pending map[string]*collective
	done    map[string]chan struct{} // closed when the name last completed
	scales  map[string][2]float64    // pre/postscale last seen per name
	dtypes  map[string]tensor.DType  // dtype last seen per allreduce name
	fail    error                    // if set, every start fails with it
}

type collective struct {
	ts   []*tensor.Tensor
	got  int
	done chan struct{}
}

func (c *collective) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newGroup(n int) *group {
	return &group{n: n, pending: map[string]*collective{}, done: map[string]chan struct{}{}, scales: map[string][2]float64{}, dtypes: map[string]tensor.DType{}}
}

// member is rank's view of the group.
type member struct {
	g    *group
	rank int
}

func (m member) Size() int { return m.g.n }

// completed returns a channel closed once name has been reduced.
func (g *group) completed(name string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.done[name]
	if !ok {
		ch = make(chan struct{})
		g.done[name] = ch
	}
	return ch
}

func (m member) start(t *tensor.Tensor, name string, finish func(ts []*tensor.Tensor)) (Waiter, error) {
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail != nil {
		return nil, g.fail
	}
	c := g.pending[name]
	if c == nil {
		c = &collective{ts: make([]*tensor.Tensor, g.n), done: make(chan struct{})}
		g.pending[name] = c
	}
	if c.ts[m.rank] != nil {
		return nil, fmt.Errorf("group: %q already in flight on rank %d", name, m.rank)
	}
	c.ts[m.rank] = t
	if c.got++; c.got == g.n {
		finish(c.ts)
		delete(g.pending, name)
		close(c.done)
		if ch, ok := g.done[name]; !ok {
			g.done[name] = c.done
		} else if ch != c.done {
			select {
			case <-ch: // fired by an earlier completion
			default:
				close(ch)
			}
		}
	}
	return c, nil
}

func asFloat64s(t *tensor.Tensor) []float64 {
	out := make([]float64, t.Len())
	switch t.DType() {
	case tensor.Float32:
		for i, v := range t.Float32s() {
			out[i] = float64(v)
		}
	case tensor.Float16:
		for i, v := range tensor.View[tensor.Float16Bits](t) {
			out[i] = float64(v.Float32())
		}
	case tensor.BFloat16:
		for i, v := range tensor.View[tensor.BFloat16Bits](t) {
			out[i] = float64(v.Float32())
		}
	default:
		return t.Float64s()
	}
	return out
}

func setFloat64s(t *tensor.Tensor, v []float64) {
	switch t.DType() {
	case tensor.Float32:
		for i := range v {
			t.Float32s()[i] = float32(v[i])
		}
	case tensor.Float16:
		for i := range v {
			tensor.View[tensor.Float16Bits](t)[i] = tensor.MakeFloat16(float32(v[i]))
		}
	case tensor.BFloat16:
		for i := range v {
			tensor.View[tensor.BFloat16Bits](t)[i] = tensor.MakeBFloat16(float32(v[i]))
		}
	default:
		copy(t.Float64s(), v)
	}
}

func (m member) AllreduceAsync(t *tensor.Tensor, name string, op tensor.ReduceOp, pre, post float64) (Waiter, error) {
	if op != Average && op != Sum {
		return nil, fmt.Errorf("group: op %v not supported", op)
	}
	m.g.mu.Lock()
	m.g.scales[name] = [2]float64{pre, post}
	m.g.dtypes[name] = t.DType()
	m.g.mu.Unlock()
	return m.start(t, "allreduce."+name, func(ts []*tensor.Tensor) {
		sum := make([]float64, t.Len())
		for _, x := range ts { // rank order: deterministic
			for i, v := range asFloat64s(x) {
				sum[i] += v * pre
			}
		}
		for i := range sum {
			if op == Average {
				sum[i] /= float64(len(ts))
			}
			sum[i] *= post
		}
		for _, x := range ts {
			setFloat64s(x, sum)
		}
	})
}

func (m member) BroadcastAsync(t *tensor.Tensor, root int, name string) (Waiter, error) {
	return m.start(t, "broadcast."+name, func(ts []*tensor.Tensor) {
		for _, x := range ts {
			copy(x.Bytes(), ts[root].Bytes())
		}
	})
}

// onRanks runs f for every rank in its own goroutine and fails on any error.
func onRanks(t *testing.T, n int, f func(rank int) error) {
	t.Helper()
	for r, err := range commtest.OnRanks(commtest.Ranks(n), f) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// linear is least-squares linear regression, loss = Σ(w·x+b-y)²/(2·B),
// whose backward reports b, then w. It reaches its gradients through the
// Param tensors (gw, gb), whose storage the DistributedOptimizer may move.
type linear struct {
	w, b   []float64
	params []Param
	// ownW and ownB, when set (newOwnLinear), are the model's own gradient
	// slices, which backward writes into directly instead of reaching
	// them through Param.Grad.
	ownW, ownB []float64
}

func newLinear(d int, seed uint64) *linear {
	r := rand.New(rand.NewPCG(seed, 3))
	l := &linear{w: make([]float64, d), b: make([]float64, 1)}
	for i := range l.w {
		l.w[i] = r.NormFloat64()
	}
	l.params = []Param{
		{Name: "w", Value: tensor.FromFloat64(l.w), Grad: tensor.New(tensor.Float64, d)},
		{Name: "b", Value: tensor.FromFloat64(l.b), Grad: tensor.New(tensor.Float64, 1)},
	}
	return l
}

// gw returns the gradient of w.
func (l *linear) gw() []float64 {
	if l.ownW != nil {
		return l.ownW
	}
	return l.params[0].Grad.Float64s()
}

// gb returns the gradient of b.
func (l *linear) gb() []float64 {
	if l.ownB != nil {
		return l.ownB
	}
	return l.params[1].Grad.Float64s()
}

// backward adds the mean gradient over rows xs (d values each) to the
// gradients, calling ready for b and then w.
func (l *linear) backward(xs, ys []float64, ready func(Param) error) error {
	d, n := len(l.w), len(ys)
	gw, gb := l.gw(), l.gb()
	for i := range n {
		x := xs[i*d : (i+1)*d]
		r := l.b[0] - ys[i]
		for j := range x {
			r += l.w[j] * x[j]
		}
		gb[0] += r / float64(n)
		for j := range x {
			gw[j] += r * x[j] / float64(n)
		}
	}
	if err := ready(l.params[1]); err != nil {
		return err
	}
	return ready(l.params[0])
}

func noReady(Param) error { return nil }

// TestEquivalence: N ranks each on 1/N of a global batch, with the
// DistributedOptimizer, end where one process on the whole batch ends,
// parameter by parameter, after many steps.
func TestEquivalence(t *testing.T) {
	const d, batch, steps = 6, 24, 60
	data := func(step int) ([]float64, []float64) {
		r := rand.New(rand.NewPCG(uint64(step), 11))
		xs, ys := make([]float64, batch*d), make([]float64, batch)
		for i := range xs {
			xs[i] = r.NormFloat64()
		}
		for i := range ys {
			ys[i] = r.NormFloat64() + xs[i*d]*2
		}
		return xs, ys
	}
	sgd := SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3}

	ref := newLinear(d, 1)
	opt, _ := NewSGD(ref.params, sgd)
	for s := range steps {
		xs, ys := data(s)
		opt.ZeroGrad()
		ref.backward(xs, ys, noReady)
		opt.Step()
	}

	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			g := newGroup(n)
			final := make([]*linear, n)
			onRanks(t, n, func(rank int) error {
				c := member{g, rank}
				m := newLinear(d, uint64(rank)+1) // only rank 0 starts from the reference's weights
				if err := BroadcastParameters(context.Background(), c, m.params, 0); err != nil {
					return err
				}
				inner, _ := NewSGD(m.params, sgd)
				opt, err := NewDistributed(inner, c)
				if err != nil {
					return err
				}
				per := batch / n
				for s := range steps {
					xs, ys := data(s)
					if err := opt.ZeroGrad(); err != nil {
						return err
					}
					if err := m.backward(xs[rank*per*d:(rank+1)*per*d], ys[rank*per:(rank+1)*per], opt.Ready); err != nil {
						return err
					}
					if err := opt.Step(); err != nil {
						return err
					}
				}
				final[rank] = m
				return nil
			})
			for rank, m := range final {
				for j := range ref.w {
					if math.Abs(m.w[j]-ref.w[j]) > 1e-12*math.Max(1, math.Abs(ref.w[j])) {
						t.Fatalf("rank %d: w[%d] = %.17g, single process %.17g", rank, j, m.w[j], ref.w[j])
					}
				}
				if math.Abs(m.b[0]-ref.b[0]) > 1e-12 {
					t.Fatalf("rank %d: b = %.17g, single process %.17g", rank, m.b[0], ref.b[0])
				}
			}
		})
	}
}

// TestOverlap shows that the allreduce of a gradient reported early in
// backward runs, and completes, before backward has finished: each rank
// reports b, then waits for b's reduction to finish before it computes w.
// Were reductions deferred to Step, this would time out.
func TestOverlap(t *testing.T) {
	g := newGroup(2)
	bDone := g.completed("allreduce.b")
	onRanks(t, 2, func(rank int) error {
		m := newLinear(3, 1)
		inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
		opt, _ := NewDistributed(inner, member{g, rank})
		m.gb()[0] = float64(rank + 1)
		if err := opt.Ready(m.params[1]); err != nil {
			return err
		}
		select {
		case <-bDone:
		case <-time.After(10 * time.Second):
			return errors.New("the reduction of b did not run during backward")
		}
		if m.gb()[0] != 1.5 {
			return fmt.Errorf("b's gradient %g during backward, want the average 1.5", m.gb()[0])
		}
		if err := opt.Ready(m.params[0]); err != nil {
			return err
		}
		return opt.Step()
	})
}

// TestUnreportedReducedAsIs: rank 1 never reports w (a rank-dependent
// model); nobody deadlocks, and w is reduced with rank 1's gradient as it
// is, as Horovod's synchronize() submits a gradient whose hook did not fire.
func TestUnreportedReducedAsIs(t *testing.T) {
	g := newGroup(2)
	grads := make([][]float64, 2)
	onRanks(t, 2, func(rank int) error {
		m := newLinear(2, 1)
		inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
		opt, _ := NewDistributed(inner, member{g, rank})
		m.gb()[0] = 1
		copy(m.gw(), []float64{4, 8})
		if rank == 1 {
			copy(m.gw(), []float64{100, 100}) // never reported
		}
		if err := opt.Ready(m.params[1]); err != nil {
			return err
		}
		if rank == 0 {
			if err := opt.Ready(m.params[0]); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := opt.Synchronize(ctx); err != nil {
			return err
		}
		grads[rank] = slices.Clone(m.gw())
		return nil
	})
	for rank, gw := range grads {
		if !slices.Equal(gw, []float64{52, 54}) {
			t.Fatalf("rank %d: w gradient %v, want [52 54]", rank, gw)
		}
	}
}

// TestBackwardPasses: with 2 passes per step, a gradient's reduction starts
// after its second report, carries the sum of both passes, and a third
// report is an error.
func TestBackwardPasses(t *testing.T) {
	g := newGroup(2)
	onRanks(t, 2, func(rank int) error {
		m := newLinear(1, 1)
		inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
		opt, _ := NewDistributed(inner, member{g, rank}, BackwardPassesPerStep(2))
		for pass := range 2 {
			m.gb()[0] += float64(rank + 1)
			if err := opt.Ready(m.params[1]); err != nil {
				return err
			}
			g.mu.Lock()
			c := g.pending["allreduce.b"]
			started := c != nil && c.ts[rank] != nil
			g.mu.Unlock()
			if pass == 0 && started {
				return errors.New("reduction started after the first of two passes")
			}
		}
		if err := opt.Ready(m.params[1]); !errors.Is(err, ErrTooManyPasses) {
			return fmt.Errorf("third report: %v, want ErrTooManyPasses", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := opt.Synchronize(ctx); err != nil {
			return err
		}
		if m.gb()[0] != 3 { // (2·1 + 2·2)/2
			return fmt.Errorf("b gradient %g, want 3", m.gb()[0])
		}
		// The counters reset: a new step takes two reports again.
		if err := opt.Ready(m.params[1]); err != nil {
			return err
		}
		return opt.Synchronize(ctx)
	})
}

// TestBackwardPassesUnderReported: with 2 passes per step, a gradient
// reported only once, or never, is still reduced at Step as it is (the
// sum of the passes that wrote it), like one reported twice.
func TestBackwardPassesUnderReported(t *testing.T) {
	g := newGroup(2)
	onRanks(t, 2, func(rank int) error {
		m := newLinear(1, 1)
		inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
		opt, _ := NewDistributed(inner, member{g, rank}, BackwardPassesPerStep(2))
		for pass := range 2 {
			m.gb()[0] += float64(rank + 1)
			m.gw()[0] += float64(10 * (rank + 1))
			if pass == 0 {
				if err := opt.Ready(m.params[1]); err != nil { // b: once of twice
					return err
				}
			} // w: never
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := opt.Synchronize(ctx); err != nil {
			return err
		}
		if m.gb()[0] != 3 || m.gw()[0] != 30 { // (2·1 + 2·2)/2, (2·10 + 2·20)/2
			return fmt.Errorf("gradients b %g, w %g, want 3 and 30", m.gb()[0], m.gw()[0])
		}
		return nil
	})
}

func TestOpsAndPredivide(t *testing.T) {
	cases := []struct {
		name      string
		opts      []DistOption
		want      []float64
		pre, post float64
	}{
		{"average", nil, []float64{2, 3}, 1, 1},
		{"sum", []DistOption{WithOp(Sum)}, []float64{4, 6}, 1, 1},
		{"predivide", []DistOption{GradientPredivideFactor(4)}, []float64{2, 3}, 0.25, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGroup(2)
			onRanks(t, 2, func(rank int) error {
				m := newLinear(2, 1)
				inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
				opt, err := NewDistributed(inner, member{g, rank}, c.opts...)
				if err != nil {
					return err
				}
				copy(m.gw(), []float64{1 + 2*float64(rank), 2 + 2*float64(rank)})
				if err := opt.Ready(m.params[0]); err != nil {
					return err
				}
				if err := opt.Synchronize(context.Background()); err != nil {
					return err
				}
				if !slices.Equal(m.gw(), c.want) {
					return fmt.Errorf("gradient %v, want %v", m.gw(), c.want)
				}
				return nil
			})
			if got := g.scales["w"]; got != [2]float64{c.pre, c.post} {
				t.Fatalf("pre/postscale %v, want %v", got, [2]float64{c.pre, c.post})
			}
		})
	}
}

func TestMisuse(t *testing.T) {
	m := newLinear(2, 1)
	inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
	g := newGroup(1)
	opt, err := NewDistributed(inner, member{g, 0})
	if err != nil {
		t.Fatal(err)
	}
	if err := opt.GradReady("nope"); !errors.Is(err, ErrUnknownParam) {
		t.Fatalf("unknown name: %v", err)
	}
	if err := opt.Ready(m.params[0]); err != nil {
		t.Fatal(err)
	}
	if err := opt.Ready(m.params[0]); !errors.Is(err, ErrTooManyPasses) {
		t.Fatalf("second report: %v", err)
	}
	if err := opt.ZeroGrad(); !errors.Is(err, ErrInFlight) {
		t.Fatalf("ZeroGrad in flight: %v", err)
	}
	if err := opt.Step(); err != nil {
		t.Fatal(err)
	}
	if err := opt.ZeroGrad(); err != nil {
		t.Fatalf("ZeroGrad after Step: %v", err)
	}

	g.fail = errors.New("shut down")
	if err := opt.Ready(m.params[1]); err == nil || !errors.Is(err, g.fail) {
		t.Fatalf("failing collective: %v", err)
	}
	if err := opt.Step(); err == nil {
		t.Fatal("Step after a failing collective succeeded")
	}

	bad := []struct {
		name string
		opts []DistOption
	}{
		{"passes 0", []DistOption{BackwardPassesPerStep(0)}},
		{"predivide 0", []DistOption{GradientPredivideFactor(0)}},
		{"predivide NaN", []DistOption{GradientPredivideFactor(math.NaN())}},
		{"predivide with sum", []DistOption{WithOp(Sum), GradientPredivideFactor(2)}},
		{"op", []DistOption{WithOp(tensor.ReduceOp(9))}},
		{"op Max", []DistOption{WithOp(hvd.Max)}},
	}
	for _, c := range bad {
		if _, err := NewDistributed(inner, member{g, 0}, c.opts...); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// TestBroadcastState: a fresh optimizer on rank 1 takes rank 0's state
// (buffers, step count, learning rate) and parameters.
func TestBroadcastState(t *testing.T) {
	g := newGroup(2)
	var states [2]*State
	var vals [2][][]byte
	onRanks(t, 2, func(rank int) error {
		ps := twoParams()
		opt, _ := NewAdam(ps, AdamConfig{LR: 0.01})
		if rank == 0 {
			runSteps(t, opt, 5, 3)
			opt.SetLR(0.005)
		}
		c := member{g, rank}
		if err := BroadcastParameters(context.Background(), c, ps, 0); err != nil {
			return err
		}
		if err := BroadcastState(context.Background(), c, opt, 0); err != nil {
			return err
		}
		states[rank], vals[rank] = opt.State(), snapshot(ps)
		return nil
	})
	if !equalSnap(vals[0], vals[1]) {
		t.Fatal("parameters differ after BroadcastParameters")
	}
	a, b := states[0], states[1]
	if b.Scalars["step"] != 3 || b.Scalars["lr"] != 0.005 {
		t.Fatalf("rank 1 scalars %v", b.Scalars)
	}
	for k, ta := range a.Tensors {
		if string(ta.Bytes()) != string(b.Tensors[k].Bytes()) {
			t.Fatalf("state tensor %q differs", k)
		}
	}
}
