package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/gohorovod/gohorovod/tensor"
)

// Op is how the DistributedOptimizer combines gradients across ranks.
type Op uint8

// The gradient reductions.
const (
	Average Op = iota // the mean over ranks (Horovod's default)
	Sum               // the sum over ranks
)

func (o Op) String() string {
	switch o {
	case Average:
		return "Average"
	case Sum:
		return "Sum"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Waiter is the handle of an asynchronous collective.
type Waiter interface {
	// Wait blocks until the collective completes or ctx is done and
	// returns its error, or ctx's.
	Wait(ctx context.Context) error
}

// Collectives is what data-parallel training needs from the runtime: the
// number of ranks, and in-place asynchronous allreduce and broadcast of named
// tensors. Every rank must start the same names (in any order). The runtime
// package provides one; tests use an in-memory one.
type Collectives interface {
	// Size returns the number of ranks.
	Size() int
	// AllreduceAsync starts combining t across ranks in place, under name:
	// each rank's t is multiplied by prescale, the results are summed (and
	// divided by Size for Average), then multiplied by postscale.
	AllreduceAsync(t *tensor.Tensor, name string, op Op, prescale, postscale float64) (Waiter, error)
	// BroadcastAsync starts copying root's t into every rank's t, under
	// name.
	BroadcastAsync(t *tensor.Tensor, root int, name string) (Waiter, error)
}

// Errors of the DistributedOptimizer. Each is returned wrapped, with the
// parameter's name.
var (
	// ErrTooManyPasses: a gradient was reported ready more times than
	// the backward passes per step before Step.
	ErrTooManyPasses = errors.New("optim: gradient reported more times than backward passes per step before Step; increase BackwardPassesPerStep to accumulate gradients locally")
	// ErrUnknownParam: a gradient was reported for a parameter the
	// optimizer does not hold.
	ErrUnknownParam = errors.New("optim: gradient reported for an unknown parameter")
	// ErrInFlight: gradients were zeroed while their reductions were in
	// flight (after backward, before Step or Synchronize).
	ErrInFlight = errors.New("optim: ZeroGrad called after backward but before Step or Synchronize; this would race with the reductions in flight")
)

// DistOption configures a DistributedOptimizer.
type DistOption func(*distConfig)

type distConfig struct {
	op        Op
	passes    int
	predivide float64
}

// WithOp sets how gradients are combined (default Average).
func WithOp(op Op) DistOption { return func(c *distConfig) { c.op = op } }

// BackwardPassesPerStep sets the number of backward passes whose gradients
// accumulate locally before one reduction (default 1). Gradients are summed
// over the passes, not averaged: scale the learning rate by passes as
// Horovod's examples do.
func BackwardPassesPerStep(n int) DistOption { return func(c *distConfig) { c.passes = n } }

// GradientPredivideFactor splits the averaging (Average only): gradients
// are divided by f before the sum and multiplied by f/size after it, which
// keeps large sums of low-precision values in range (default 1).
func GradientPredivideFactor(f float64) DistOption { return func(c *distConfig) { c.predivide = f } }

// DistributedOptimizer wraps an Optimizer for data-parallel training. The
// training code reports each parameter's gradient as soon as backward has
// finished it (Ready, or pass Ready to a backward that takes a callback);
// the optimizer starts that gradient's allreduce at once, so communication
// overlaps the rest of backward. Step waits for every reduction, then runs
// the wrapped optimizer on the combined gradients.
//
// A parameter whose gradient was never reported during a step is reduced
// anyway, as zeros, so that every rank starts the same names and no rank
// waits forever on a rank-dependent model.
//
// Ready may be called from another goroutine than Step, but calls of one
// step must happen before that Step.
type DistributedOptimizer struct {
	inner Optimizer
	coll  Collectives
	cfg   distConfig
	index map[string]int

	mu      sync.Mutex
	count   []int    // times reported this step, per parameter
	handles []Waiter // in flight, per parameter (nil when not started)
}

var _ Optimizer = (*DistributedOptimizer)(nil)

// NewDistributed wraps inner, reducing gradients with coll.
func NewDistributed(inner Optimizer, coll Collectives, opts ...DistOption) (*DistributedOptimizer, error) {
	cfg := distConfig{op: Average, passes: 1, predivide: 1}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.op != Average && cfg.op != Sum:
		return nil, fmt.Errorf("optim: DistributedOptimizer: unsupported op %v", cfg.op)
	case cfg.passes < 1:
		return nil, fmt.Errorf("optim: DistributedOptimizer: backward passes per step %d must be > 0", cfg.passes)
	case !(cfg.predivide > 0) || math.IsInf(cfg.predivide, 0):
		return nil, fmt.Errorf("optim: DistributedOptimizer: gradient predivide factor %g must be positive", cfg.predivide)
	case cfg.predivide != 1 && cfg.op != Average:
		return nil, fmt.Errorf("optim: DistributedOptimizer: gradient predivide factor needs op Average, not %v", cfg.op)
	}
	params := inner.Params()
	if err := CheckParams(params); err != nil {
		return nil, err
	}
	d := &DistributedOptimizer{inner: inner, coll: coll, cfg: cfg, index: make(map[string]int, len(params)),
		count: make([]int, len(params)), handles: make([]Waiter, len(params))}
	for i, p := range params {
		d.index[p.Name] = i
	}
	return d, nil
}

// Ready reports that p's gradient is final for this backward pass. After
// the last of BackwardPassesPerStep passes it starts the gradient's
// allreduce.
func (d *DistributedOptimizer) Ready(p Param) error { return d.GradReady(p.Name) }

// GradReady is Ready by parameter name.
func (d *DistributedOptimizer) GradReady(name string) error {
	i, ok := d.index[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownParam, name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.count[i] >= d.cfg.passes {
		return fmt.Errorf("%w (parameter %q, %d passes)", ErrTooManyPasses, name, d.cfg.passes)
	}
	d.count[i]++
	if d.count[i] == d.cfg.passes {
		return d.start(i)
	}
	return nil
}

// start launches parameter i's allreduce; d.mu is held.
func (d *DistributedOptimizer) start(i int) error {
	p := d.inner.Params()[i]
	pre, post := 1.0, 1.0
	if d.cfg.predivide != 1 {
		pre, post = 1/d.cfg.predivide, d.cfg.predivide
	}
	h, err := d.coll.AllreduceAsync(p.Grad, p.Name, d.cfg.op, pre, post)
	if err != nil {
		return fmt.Errorf("optim: allreduce of the gradient of %q: %w", p.Name, err)
	}
	d.handles[i] = h
	return nil
}

// Synchronize starts the reduction of every gradient not yet started (a
// gradient never reported is zeroed first), waits for all of them, and
// readies the optimizer for the next step. Step calls it.
func (d *DistributedOptimizer) Synchronize(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var first error
	for i, p := range d.inner.Params() {
		if d.handles[i] != nil {
			continue
		}
		if d.count[i] == 0 {
			clear(p.Grad.Bytes())
		}
		if err := d.start(i); err != nil && first == nil {
			first = err
		}
	}
	for i, h := range d.handles {
		if h == nil {
			continue
		}
		if err := h.Wait(ctx); err != nil && first == nil {
			first = fmt.Errorf("optim: allreduce of the gradient of %q: %w", d.inner.Params()[i].Name, err)
		}
	}
	clear(d.handles)
	clear(d.count)
	return first
}

// Step synchronizes the gradients (see Synchronize) and runs the wrapped
// optimizer's step.
func (d *DistributedOptimizer) Step() error { return d.StepContext(context.Background()) }

// StepContext is Step with a context for the waits.
func (d *DistributedOptimizer) StepContext(ctx context.Context) error {
	if err := d.Synchronize(ctx); err != nil {
		return err
	}
	return d.inner.Step()
}

// ZeroGrad zeroes the gradients. It fails with ErrInFlight while a
// reduction is in flight.
func (d *DistributedOptimizer) ZeroGrad() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, h := range d.handles {
		if h != nil {
			return fmt.Errorf("%w (parameter %q)", ErrInFlight, d.inner.Params()[i].Name)
		}
	}
	return d.inner.ZeroGrad()
}

// Params returns the wrapped optimizer's parameters.
func (d *DistributedOptimizer) Params() []Param { return d.inner.Params() }

// LR returns the wrapped optimizer's learning rate.
func (d *DistributedOptimizer) LR() float64 { return d.inner.LR() }

// SetLR sets the wrapped optimizer's learning rate.
func (d *DistributedOptimizer) SetLR(lr float64) { d.inner.SetLR(lr) }

// State returns the wrapped optimizer's state.
func (d *DistributedOptimizer) State() *State { return d.inner.State() }

// SetState sets the wrapped optimizer's state.
func (d *DistributedOptimizer) SetState(s *State) error { return d.inner.SetState(s) }

// Unwrap returns the wrapped optimizer.
func (d *DistributedOptimizer) Unwrap() Optimizer { return d.inner }

// BroadcastParameters copies root's parameter values to every rank, in
// place, broadcasting them in name order (call it on every rank after
// building the model, so that all ranks start from the same weights).
func BroadcastParameters(ctx context.Context, c Collectives, params []Param, root int) error {
	ts := make(map[string]*tensor.Tensor, len(params))
	for _, p := range params {
		ts[p.Name] = p.Value
	}
	return broadcastAll(ctx, c, ts, root, "param.")
}

// BroadcastState copies root's optimizer state (buffers and scalar
// hyper-parameters, learning rate and step count included) to every rank.
// The optimizers must be of the same kind over the same parameters.
func BroadcastState(ctx context.Context, c Collectives, opt Optimizer, root int) error {
	s := opt.State()
	keys := make([]string, 0, len(s.Scalars))
	for k := range s.Scalars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	scalars := make([]float64, len(keys))
	for i, k := range keys {
		scalars[i] = s.Scalars[k]
	}
	ts := make(map[string]*tensor.Tensor, len(s.Tensors)+1)
	for k, t := range s.Tensors {
		ts["state."+k] = t
	}
	ts["scalars"] = tensor.FromFloat64(scalars)
	if err := broadcastAll(ctx, c, ts, root, "optimizer."); err != nil {
		return err
	}
	for i, k := range keys {
		s.Scalars[k] = scalars[i]
	}
	return opt.SetState(s)
}

func broadcastAll(ctx context.Context, c Collectives, ts map[string]*tensor.Tensor, root int, prefix string) error {
	names := make([]string, 0, len(ts))
	for k := range ts {
		names = append(names, k)
	}
	sort.Strings(names)
	hs := make([]Waiter, 0, len(names))
	var first error
	for _, n := range names {
		h, err := c.BroadcastAsync(ts[n], root, prefix+n)
		if err != nil {
			first = fmt.Errorf("optim: broadcast of %q: %w", n, err)
			break
		}
		hs = append(hs, h)
	}
	for i, h := range hs {
		if err := h.Wait(ctx); err != nil && first == nil {
			first = fmt.Errorf("optim: broadcast of %q: %w", names[i], err)
		}
	}
	return first
}
