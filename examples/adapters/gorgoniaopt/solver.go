package gorgoniaopt

import (
	"context"
	"fmt"

	"gorgonia.org/gorgonia"
	gtensor "gorgonia.org/tensor"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// Option configures a Solver.
type Option func(*Solver)

// WithOp sets how gradients are combined across ranks (default
// optim.Average; optim.Sum for a loss that sums over samples).
func WithOp(op tensor.ReduceOp) Option { return func(s *Solver) { s.op = op } }

// WithName sets the prefix of the collectives' names (default
// "gorgonia"), so that several solvers can step at the same time.
func WithName(name string) Option { return func(s *Solver) { s.name = name } }

// WithContext bounds every wait for the other ranks by ctx (default
// context.Background()).
func WithContext(ctx context.Context) Option { return func(s *Solver) { s.ctx = ctx } }

// Solver is a gorgonia.Solver that combines every gradient across ranks
// before the wrapped solver's Step, so that each rank takes the step of the
// global batch: training on N ranks with a shard of the batch each follows
// one process on the whole batch.
//
// Every rank must step the same model (the same nodes in the same order) the
// same number of times.
type Solver struct {
	inner gorgonia.Solver
	coll  optim.Collectives
	op    tensor.ReduceOp
	name  string
	ctx   context.Context
}

var _ gorgonia.Solver = (*Solver)(nil)

// New wraps inner, combining gradients with coll (optim.FromRuntime(r) for
// a gohorovod Runtime).
func New(inner gorgonia.Solver, coll optim.Collectives, opts ...Option) *Solver {
	s := &Solver{inner: inner, coll: coll, op: optim.Average, name: "gorgonia", ctx: context.Background()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Unwrap returns the wrapped solver.
func (s *Solver) Unwrap() gorgonia.Solver { return s.inner }

// Step starts the allreduce of every node's gradient at once (the runtime
// fuses them), waits for them, and then runs the wrapped solver's Step on
// the combined gradients.
func (s *Solver) Step(model []gorgonia.ValueGrad) error {
	bufs := make([]buffer, 0, len(model))
	hs := make([]optim.Waiter, 0, len(model))
	var first error
	for i, n := range model {
		g, err := n.Grad()
		if err != nil {
			first = fmt.Errorf("gorgoniaopt: gradient of %s: %w", nodeName(n, i), err)
			break
		}
		b, err := bufferOf(g)
		if err != nil {
			first = fmt.Errorf("gorgoniaopt: gradient of %s: %w", nodeName(n, i), err)
			break
		}
		h, err := s.coll.AllreduceAsync(b.t, fmt.Sprintf("%s.%d.%s", s.name, i, nodeName(n, i)), s.op, 1, 1)
		if err != nil {
			first = fmt.Errorf("gorgoniaopt: allreduce of the gradient of %s: %w", nodeName(n, i), err)
			break
		}
		bufs, hs = append(bufs, b), append(hs, h)
	}
	// Wait for whatever was started, even after an error: the other ranks
	// are committed to those reductions.
	for i, h := range hs {
		if err := h.Wait(s.ctx); err != nil && first == nil {
			first = fmt.Errorf("gorgoniaopt: allreduce of the gradient of %s: %w", nodeName(model[i], i), err)
		}
	}
	if first != nil {
		return first
	}
	for _, b := range bufs {
		b.store()
	}
	return s.inner.Step(model)
}

// Broadcast copies root's values of the model's nodes to every rank, in
// place, so that all ranks start from the same weights.
func Broadcast(ctx context.Context, coll optim.Collectives, model []gorgonia.ValueGrad, root int) error {
	bufs := make([]buffer, len(model))
	for i, n := range model {
		b, err := bufferOf(n.Value())
		if err != nil {
			return fmt.Errorf("gorgoniaopt: value of %s: %w", nodeName(n, i), err)
		}
		bufs[i] = b
	}
	hs := make([]optim.Waiter, 0, len(model))
	var first error
	for i, b := range bufs {
		h, err := coll.BroadcastAsync(b.t, root, fmt.Sprintf("gorgonia.broadcast.%d.%s", i, nodeName(model[i], i)))
		if err != nil {
			first = fmt.Errorf("gorgoniaopt: broadcast of %s: %w", nodeName(model[i], i), err)
			break
		}
		hs = append(hs, h)
	}
	for i, h := range hs {
		if err := h.Wait(ctx); err != nil && first == nil {
			first = fmt.Errorf("gorgoniaopt: broadcast of %s: %w", nodeName(model[i], i), err)
		}
	}
	if first != nil {
		return first
	}
	for _, b := range bufs {
		b.store()
	}
	return nil
}

func nodeName(n gorgonia.ValueGrad, i int) string {
	if nm, ok := n.(gorgonia.Namer); ok && nm.Name() != "" {
		return nm.Name()
	}
	return fmt.Sprintf("node%d", i)
}

// buffer is a gohorovod tensor over a gorgonia value: a view of a dense
// tensor's storage, or a copy of a scalar that store writes back.
type buffer struct {
	t     *tensor.Tensor
	store func()
}

func noStore() {}

// bufferOf returns the buffer of a float64 or float32 gorgonia value.
func bufferOf(v gorgonia.Value) (buffer, error) {
	switch v := v.(type) {
	case *gtensor.Dense:
		switch v.Dtype() {
		case gtensor.Float64:
			return buffer{tensor.FromFloat64(v.Float64s()[:v.DataSize()]), noStore}, nil
		case gtensor.Float32:
			return buffer{tensor.FromFloat32(v.Float32s()[:v.DataSize()]), noStore}, nil
		}
		return buffer{}, fmt.Errorf("unsupported dtype %v (float64 or float32)", v.Dtype())
	case *gorgonia.F64:
		x := []float64{float64(*v)}
		return buffer{tensor.FromFloat64(x), func() { *v = gorgonia.F64(x[0]) }}, nil
	case *gorgonia.F32:
		x := []float32{float32(*v)}
		return buffer{tensor.FromFloat32(x), func() { *v = gorgonia.F32(x[0]) }}, nil
	}
	return buffer{}, fmt.Errorf("unsupported value %T (a *tensor.Dense, *F64 or *F32)", v)
}
