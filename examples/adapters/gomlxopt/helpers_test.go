package gomlxopt

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// testBackend runs one op at a time: GoMLX's parallel executor in the Go
// backend (executeParallel) has data races that -race reports.
var testBackend = sync.OnceValue(func() backends.Backend {
	b, err := simplego.New("ops_sequential")
	if err != nil {
		panic(err)
	}
	return b
})

// A small classifier: 8 features, a hidden layer of 16, 3 classes.
const (
	features = 8
	classes  = 3
)

func mlpModel(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := layers.DenseWithBias(ctx.In("hidden"), inputs[0], 16)
	x = activations.Relu(x)
	return []*graph.Node{layers.DenseWithBias(ctx.In("out"), x, classes)}
}

func newCtx(seed int64) *mlctx.Context {
	ctx := mlctx.New()
	ctx.SetParam(mlctx.ParamInitialSeed, seed)
	return ctx
}

// batchData returns n rows of synthetic data: the label is a linear
// function of the features, so the loss can fall.
func batchData(n int, seed uint64) (x []float32, y []int32) {
	r := rand.New(rand.NewPCG(seed, 7))
	x = make([]float32, n*features)
	y = make([]int32, n)
	for i := range n {
		var s float32
		for j := range features {
			v := float32(r.NormFloat64())
			x[i*features+j] = v
			s += v * float32(j-3)
		}
		switch {
		case s < -2:
			y[i] = 0
		case s < 2:
			y[i] = 1
		default:
			y[i] = 2
		}
	}
	return x, y
}

// rows returns rows [lo, hi) as the inputs and labels of a step.
func rows(x []float32, y []int32, lo, hi int) (inputs, labels []*tensors.Tensor) {
	xi := tensors.FromFlatDataAndDimensions(append([]float32(nil), x[lo*features:hi*features]...), hi-lo, features)
	yi := tensors.FromFlatDataAndDimensions(append([]int32(nil), y[lo:hi]...), hi-lo, 1)
	return []*tensors.Tensor{xi}, []*tensors.Tensor{yi}
}

// flatVars returns every trainable variable's values, by name.
func flatVars(t testing.TB, ctx *mlctx.Context) map[string][]float32 {
	out := map[string][]float32{}
	for v := range ctx.IterVariables() {
		if !v.Trainable {
			continue
		}
		val, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		out[v.ScopeAndName()] = tensors.MustCopyFlatData[float32](val)
	}
	return out
}

// maxRelDiff is max |a-b| / (1 + |b|) over the variables of b (which a
// must all have).
func maxRelDiff(t testing.TB, a, b map[string][]float32) float64 {
	var m float64
	if len(a) != len(b) || len(b) == 0 {
		t.Fatalf("%d variables against %d", len(a), len(b))
	}
	for name, bv := range b {
		av, ok := a[name]
		if !ok || len(av) != len(bv) {
			t.Fatalf("variable %s differs in size", name)
		}
		for i := range bv {
			m = math.Max(m, math.Abs(float64(av[i]-bv[i]))/(1+math.Abs(float64(bv[i]))))
		}
	}
	return m
}

// reference trains one process on the whole batch of size·b rows per step
// with GoMLX's own train.Trainer and returns the variables and the losses.
func reference(t testing.TB, opt func() optimizers.Interface, steps, global int, x []float32, y []int32) (map[string][]float32, []float64) {
	ctx := newCtx(42)
	tr := train.NewTrainer(testBackend(), ctx, mlpModel, losses.SparseCategoricalCrossEntropyLogits, opt(), nil, nil)
	var ls []float64
	for s := range steps {
		in, lab := rows(x, y, s*global, (s+1)*global)
		m, err := tr.TrainStep(nil, in, lab)
		if err != nil {
			t.Fatal(err)
		}
		l, err := scalar(m[0])
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return flatVars(t, ctx), ls
}

// equivalenceTol bounds the float32 difference between size ranks on b rows
// each and one process on size·b rows: the same sums in another order
// (and the gradient average of the ranks for the mean over all rows).
const equivalenceTol = 1e-5

// runRank trains rank's share (rows [rank·b, (rank+1)·b) of each global
// batch) through a Trainer over coll, starting from other weights than rank
// 0's (seed 42+rank) so that the broadcast matters, and returns its
// variables and its losses averaged over the ranks.
func runRank(ctx context.Context, coll optim.Collectives, rank, size, b, steps int, opt func() optimizers.Interface,
	x []float32, y []int32, opts ...Option) (map[string][]float32, []float64, error) {
	mctx := newCtx(42 + int64(rank))
	tr, err := NewTrainer(testBackend(), mctx, mlpModel, losses.SparseCategoricalCrossEntropyLogits, opt(), coll, opts...)
	if err != nil {
		return nil, nil, err
	}
	var ls []float64
	for s := range steps {
		lo := s*size*b + rank*b
		in, lab := rows(x, y, lo, lo+b)
		l, err := tr.TrainStep(ctx, in, lab)
		if err != nil {
			return nil, nil, fmt.Errorf("step %d: %w", s, err)
		}
		lt := tensor.FromFloat64([]float64{l}, 1)
		w, err := coll.AllreduceAsync(lt, fmt.Sprintf("test.loss.%d", s), optim.Average, 1, 1)
		if err != nil {
			return nil, nil, err
		}
		if err := w.Wait(ctx); err != nil {
			return nil, nil, err
		}
		ls = append(ls, lt.Float64s()[0])
	}
	out := map[string][]float32{}
	for v := range tr.Context().IterVariables() {
		if v.Trainable {
			out[v.ScopeAndName()] = tensors.MustCopyFlatData[float32](v.MustValue())
		}
	}
	return out, ls, nil
}

// memHub is an in-memory Collectives for size goroutines.
type memHub struct {
	mu      sync.Mutex
	size    int
	pending map[string]*memRound
	fail    error // when set, every collective fails with it
}

type memRound struct {
	parts []*tensor.Tensor
	n     int
	done  chan struct{}
}

func newHub(size int) *memHub { return &memHub{size: size, pending: map[string]*memRound{}} }

type memColl struct {
	h    *memHub
	rank int
}

func (h *memHub) coll(rank int) *memColl { return &memColl{h: h, rank: rank} }

func (c *memColl) Size() int { return c.h.size }

func (c *memColl) join(key string, t *tensor.Tensor, finish func(parts []*tensor.Tensor)) (optim.Waiter, error) {
	h := c.h
	h.mu.Lock()
	if h.fail != nil {
		h.mu.Unlock()
		return nil, h.fail
	}
	r := h.pending[key]
	if r == nil {
		r = &memRound{parts: make([]*tensor.Tensor, h.size), done: make(chan struct{})}
		h.pending[key] = r
	}
	r.parts[c.rank] = t
	r.n++
	if r.n == h.size {
		delete(h.pending, key)
		finish(r.parts)
		close(r.done)
	}
	h.mu.Unlock()
	return optim.Async(func() error { <-r.done; return nil }), nil
}

func (c *memColl) AllreduceAsync(t *tensor.Tensor, name string, op tensor.ReduceOp, pre, post float64) (optim.Waiter, error) {
	return c.join("ar."+name, t, func(parts []*tensor.Tensor) {
		acc := parts[0].Clone()
		for _, p := range parts[1:] {
			if err := tensor.ReduceInto(acc, p, op.Kernel()); err != nil {
				panic(err)
			}
		}
		if op == optim.Average {
			tensor.ScaleTensor(acc, 1/float64(len(parts)))
		}
		for _, p := range parts {
			copy(p.Bytes(), acc.Bytes())
		}
	})
}

func (c *memColl) BroadcastAsync(t *tensor.Tensor, root int, name string) (optim.Waiter, error) {
	return c.join("bc."+name, t, func(parts []*tensor.Tensor) {
		for _, p := range parts {
			copy(p.Bytes(), parts[root].Bytes())
		}
	})
}
