package gonumopt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// Local is this rank's part of the objective: the loss, gradient and,
// optionally, Hessian on the rank's shard of the data. Func is required;
// Grad is needed by gradient-based methods (BFGS, LBFGS, CG,
// GradientDescent), Hess by Newton.
type Local struct {
	Func func(x []float64) float64
	Grad func(grad, x []float64)
	Hess func(hess *mat.SymDense, x []float64)
	// Weight is this rank's share of the global objective, e.g. the number
	// of samples in its shard when Func is the mean loss over them. The
	// global objective is the weighted mean of the ranks' Func; with every
	// Weight 0 (or all equal) it is the plain mean. Negative weights are an
	// error.
	Weight float64
}

// Option configures an Objective.
type Option func(*options)

type options struct {
	name string
	ctx  context.Context
}

// WithName sets the prefix of the collectives' names (default "gonumopt"),
// so that several objectives can be evaluated at the same time.
func WithName(name string) Option { return func(c *options) { c.name = name } }

// WithContext bounds every wait for the other ranks by ctx (default
// context.Background()).
func WithContext(ctx context.Context) Option { return func(c *options) { c.ctx = ctx } }

// Objective is a distributed objective function: its Problem evaluates this
// rank's Local and combines the result across ranks by allreduce, so that
// every rank sees the same global values and a deterministic gonum method
// takes the same path, and reaches the same minimiser, on every rank.
//
// Every rank must evaluate the same sequence of calls: run the same
// method with the same settings and starting point on every rank, one
// evaluation at a time (optimize.Settings.Concurrent 0 or 1), and stop only
// on criteria that depend on the values (GradientThreshold, Converger,
// MajorIterations, FuncEvaluations...), never on wall time.
type Objective struct {
	c      optim.Collectives
	local  Local
	cfg    options
	share  float64 // this rank's Weight over the sum of weights
	mu     sync.Mutex
	err    error
	scalar []float64
}

// New builds the objective of this rank. It is a collective call: every
// rank must call it, because the ranks' weights are summed here.
func New(c optim.Collectives, local Local, opts ...Option) (*Objective, error) {
	cfg := options{name: "gonumopt", ctx: context.Background()}
	for _, o := range opts {
		o(&cfg)
	}
	if local.Func == nil {
		return nil, errors.New("gonumopt: Local.Func is nil")
	}
	if !(local.Weight >= 0) {
		return nil, fmt.Errorf("gonumopt: Local.Weight %g must be >= 0", local.Weight)
	}
	o := &Objective{c: c, local: local, cfg: cfg, scalar: make([]float64, 1)}
	// Sum the weights, and count the ranks that gave none: with every
	// weight 0, all ranks count equally.
	w := tensor.FromFloat64([]float64{local.Weight})
	if err := o.allreduce(w, "weight", 1); err != nil {
		return nil, err
	}
	switch total := w.Float64s()[0]; {
	case total > 0:
		o.share = local.Weight / total
	case total == 0:
		o.share = 1 / float64(c.Size())
	default:
		return nil, fmt.Errorf("gonumopt: the ranks' weights sum to %g", total)
	}
	return o, nil
}

// Share returns this rank's share of the global objective (its Weight over
// the sum of all ranks' weights).
func (o *Objective) Share() float64 { return o.share }

// Err returns the first error of a collective, if any. After an error the
// Problem's Status reports optimize.Failure, which stops the method.
func (o *Objective) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func (o *Objective) fail(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
}

// allreduce sums t in place across ranks, each rank's t multiplied by its
// weight first. (The weights differ between ranks, so they are applied
// here: the runtime, like Horovod, wants the same prescale factor from
// every rank.)
func (o *Objective) allreduce(t *tensor.Tensor, what string, weight float64) error {
	if weight != 1 {
		v := t.Float64s()
		for i := range v {
			v[i] *= weight
		}
	}
	h, err := o.c.AllreduceAsync(t, o.cfg.name+"."+what, optim.Sum, 1, 1)
	if err == nil {
		err = h.Wait(o.cfg.ctx)
	}
	if err != nil {
		return fmt.Errorf("gonumopt: allreduce of the %s: %w", what, err)
	}
	return nil
}

// Func returns the global objective at x: the weighted mean of the ranks'
// Local.Func. After a collective error it returns NaN.
func (o *Objective) Func(x []float64) float64 {
	o.scalar[0] = o.local.Func(x)
	if err := o.allreduce(tensor.FromFloat64(o.scalar), "func", o.share); err != nil {
		o.fail(err)
		return math.NaN()
	}
	return o.scalar[0]
}

// Grad stores the global gradient at x in grad: the weighted mean of the
// ranks' Local.Grad.
func (o *Objective) Grad(grad, x []float64) {
	o.local.Grad(grad, x)
	if err := o.allreduce(tensor.FromFloat64(grad), "grad", o.share); err != nil {
		o.fail(err)
		fillNaN(grad)
	}
}

// Hess stores the global Hessian at x in hess: the weighted mean of the
// ranks' Local.Hess.
func (o *Objective) Hess(hess *mat.SymDense, x []float64) {
	o.local.Hess(hess, x)
	raw := hess.RawSymmetric()
	// The upper triangle is what SymDense reads; reduce the whole backing
	// rows so that the call is one contiguous tensor.
	data := raw.Data[:(raw.N-1)*raw.Stride+raw.N]
	if err := o.allreduce(tensor.FromFloat64(data), "hess", o.share); err != nil {
		o.fail(err)
		fillNaN(data)
	}
}

// Status reports optimize.Failure and the error once a collective has
// failed, else optimize.NotTerminated.
func (o *Objective) Status() (optimize.Status, error) {
	if err := o.Err(); err != nil {
		return optimize.Failure, err
	}
	return optimize.NotTerminated, nil
}

// Problem returns the optimize.Problem to hand to optimize.Minimize: Func,
// and Grad and Hess where Local has them, each combined across ranks, and
// Status.
func (o *Objective) Problem() optimize.Problem {
	p := optimize.Problem{Func: o.Func, Status: o.Status}
	if o.local.Grad != nil {
		p.Grad = o.Grad
	}
	if o.local.Hess != nil {
		p.Hess = o.Hess
	}
	return p
}

func fillNaN(s []float64) {
	for i := range s {
		s[i] = math.NaN()
	}
}
