package optim

import (
	"context"
	"fmt"
	"math"
)

// LocalSGDConfig configures a PostLocalSGD optimizer.
type LocalSGDConfig struct {
	// StartLocalSGDIter is the number of synchronous steps (gradients
	// allreduced by the DistributedOptimizer) before local SGD starts
	// (PyTorch's start_localSGD_iter). 0 starts local SGD at the first
	// step.
	StartLocalSGDIter int
	// ModelAveragingPeriod is the number of local steps between two
	// averagings of the parameters over every rank of the
	// DistributedOptimizer's Collectives (PyTorch's period; at least 1).
	// Period 1 with plain SGD is synchronous SGD again.
	ModelAveragingPeriod int
	// AverageState averages the optimizer's state tensors (momentum
	// buffers, Adam's moments) along with the parameters.
	AverageState bool
	// Hierarchy, optional, adds levels of averaging under the global
	// one (PyTorch's HierarchicalModelAverager): typically one level,
	// within each node (FromProcessSet with the node's set from
	// hvd.Runtime.AddNodeProcessSets) every k1 steps. Periods ascend,
	// each a multiple of the one before, and ModelAveragingPeriod is a
	// multiple of the last; a step due at several levels averages at the
	// global one.
	Hierarchy []AveragingLevel
}

// PostLocalSGD is post-local SGD (Lin et al., "Don't Use Large
// Mini-Batches, Use Local SGD", arXiv 1808.07217), as PyTorch's
// PostLocalSGDOptimizer with its post_localSGD_hook: for the first
// StartLocalSGDIter steps it is the DistributedOptimizer it wraps (Ready
// starts the gradients' allreduce, Step waits for them and steps); after
// that each rank steps on its own gradients, without any gradient
// allreduce (Ready does nothing), and every ModelAveragingPeriod steps the
// ranks average their parameters (see ModelAverager). Averaging every P
// steps moves the parameters' bytes once per P steps instead of the
// gradients' bytes every step.
//
// The parameters differ between ranks between two averagings: evaluate
// or checkpoint right after an averaging step (Averaged), or average first
// (AverageNow). The step count is part of State, so that BroadcastState and
// checkpoints carry the phase along.
//
// A PostLocalSGD is used by one goroutine at a time (Ready, as the
// DistributedOptimizer's, may be called from another goroutine than Step
// during the synchronous phase).
//
// # Cancellation
//
// In the synchronous phase, a cancelled StepContext is the
// DistributedOptimizer's (see its Cancellation): calling StepContext or
// Step again finishes the step. In the local phase, a StepContext
// cancelled while the averaging is in flight has stepped already; it
// returns an error wrapping the context's, and the next StepContext or
// Step finishes that averaging without stepping again.
type PostLocalSGD struct {
	dist        *DistributedOptimizer
	cfg         LocalSGDConfig
	avg         *ModelAverager
	step        int  // steps taken
	averaged    bool // the last step ended with an averaging
	interrupted bool // the last local step's averaging is still in flight
}

var _ Optimizer = (*PostLocalSGD)(nil)

// localSGDStepKey is the scalar of State that holds PostLocalSGD's step
// count, next to the wrapped optimizer's scalars.
const localSGDStepKey = "post_local_sgd.step"

// NewPostLocalSGD wraps dist for post-local SGD. The global averaging runs
// over dist's Collectives of the moment (and AverageState averages the
// state of the optimizer dist wraps): after dist.Rebind (an elastic job
// re-formed), make a new PostLocalSGD, carrying the step count over with
// State and SetState.
func NewPostLocalSGD(dist *DistributedOptimizer, cfg LocalSGDConfig) (*PostLocalSGD, error) {
	switch {
	case dist == nil:
		return nil, fmt.Errorf("%w: nil DistributedOptimizer", ErrAveraging)
	case cfg.StartLocalSGDIter < 0:
		return nil, fmt.Errorf("%w: StartLocalSGDIter %d must be >= 0", ErrAveraging, cfg.StartLocalSGDIter)
	case cfg.ModelAveragingPeriod < 1:
		return nil, fmt.Errorf("%w: ModelAveragingPeriod %d must be >= 1", ErrAveraging, cfg.ModelAveragingPeriod)
	}
	levels := append(append([]AveragingLevel(nil), cfg.Hierarchy...), AveragingLevel{Period: cfg.ModelAveragingPeriod, Coll: dist.coll})
	opts := []AveragerOption{WarmupSteps(cfg.StartLocalSGDIter)}
	if cfg.AverageState {
		opts = append(opts, AverageState(dist.inner))
	}
	avg, err := NewHierarchicalAverager(dist.Params(), levels, opts...)
	if err != nil {
		return nil, err
	}
	return &PostLocalSGD{dist: dist, cfg: cfg, avg: avg}, nil
}

// Local reports whether the next step is a local one (no gradient
// allreduce).
func (o *PostLocalSGD) Local() bool { return o.step >= o.cfg.StartLocalSGDIter }

// Steps returns the number of steps taken.
func (o *PostLocalSGD) Steps() int { return o.step }

// Averaged reports whether the ranks' parameters agree after the last
// step: it was synchronous, or ended with a global averaging. (After a
// step that averaged within the nodes only, they agree within each node.)
func (o *PostLocalSGD) Averaged() bool { return o.averaged }

// Averager returns the ModelAverager of the local phase.
func (o *PostLocalSGD) Averager() *ModelAverager { return o.avg }

// Ready reports that p's gradient is final for this backward pass: the
// DistributedOptimizer's Ready in the synchronous phase; in the local
// phase it only checks the name.
func (o *PostLocalSGD) Ready(p Param) error { return o.GradReady(p.Name) }

// GradReady is Ready by parameter name.
func (o *PostLocalSGD) GradReady(name string) error {
	if !o.Local() {
		return o.dist.GradReady(name)
	}
	if _, ok := o.dist.index[name]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownParam, name)
	}
	return nil
}

// Step takes one step (see StepContext).
func (o *PostLocalSGD) Step() error { return o.StepContext(context.Background()) }

// StepContext takes one step: in the synchronous phase the
// DistributedOptimizer's StepContext; in the local phase the wrapped
// optimizer's own step on this rank's gradients, followed by the
// averaging when one is due. See Cancellation in the type's
// documentation.
func (o *PostLocalSGD) StepContext(ctx context.Context) error {
	if o.avg.pending != nil {
		// An averaging left in flight: by this method (its step is
		// taken: finishing the averaging finishes it) or by AverageNow.
		level := o.avg.pendingLevel
		if err := o.avg.Wait(ctx); err != nil {
			return err
		}
		if o.interrupted {
			o.interrupted = false
			o.averaged = level == len(o.avg.levels)-1
			return nil
		}
	}
	if !o.Local() {
		if err := o.dist.StepContext(ctx); err != nil {
			return err
		}
		o.step++
		o.averaged = true
		return nil
	}
	if err := o.dist.checkStale(); err != nil {
		return err
	}
	if err := o.dist.inner.Step(); err != nil {
		return err
	}
	o.step++
	o.averaged = false
	level := o.avg.Due(o.step)
	if level < 0 {
		return nil
	}
	if err := o.avg.AverageNow(ctx, level); err != nil {
		o.interrupted = o.avg.pending != nil
		return err
	}
	o.averaged = level == len(o.avg.levels)-1
	return nil
}

// AverageNow averages the parameters (and, with AverageState, the
// optimizer state) over every rank now, whatever the step: before an
// evaluation or a checkpoint in the middle of a period. Every rank must
// call it at the same step.
func (o *PostLocalSGD) AverageNow(ctx context.Context) error {
	if err := o.avg.Wait(ctx); err != nil {
		return err // an interrupted step's averaging is still in flight
	}
	o.interrupted = false
	if err := o.avg.AverageNow(ctx, len(o.avg.levels)-1); err != nil {
		return err // in flight: the next step waits for it before stepping
	}
	o.averaged = true
	return nil
}

// checkStale checks, once per gradient, that nothing wrote into the
// storage a gradient had before the optimizer moved it into the flat
// buffer (which Ready and Synchronize check in the synchronous phase), so
// that a local step never trains on gradients nobody writes.
func (d *DistributedOptimizer) checkStale() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stale == nil {
		return nil
	}
	var first error
	for i := range d.inner.Params() {
		if err := d.checkMoved(i); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ZeroGrad zeroes the gradients (the DistributedOptimizer's ZeroGrad).
func (o *PostLocalSGD) ZeroGrad() error { return o.dist.ZeroGrad() }

// Params returns the parameters.
func (o *PostLocalSGD) Params() []Param { return o.dist.Params() }

// LR returns the wrapped optimizer's learning rate.
func (o *PostLocalSGD) LR() float64 { return o.dist.LR() }

// SetLR sets the wrapped optimizer's learning rate.
func (o *PostLocalSGD) SetLR(lr float64) { o.dist.SetLR(lr) }

// Unwrap returns the DistributedOptimizer.
func (o *PostLocalSGD) Unwrap() Optimizer { return o.dist }

// Close closes the DistributedOptimizer.
func (o *PostLocalSGD) Close() error { return o.dist.Close() }

// State returns the wrapped optimizer's state with the step count added as
// the scalar "post_local_sgd.step".
func (o *PostLocalSGD) State() *State {
	s := o.dist.State()
	s.Scalars[localSGDStepKey] = float64(o.step)
	return s
}

// SetState sets the wrapped optimizer's state and the step count from s,
// which must come from a PostLocalSGD's State.
func (o *PostLocalSGD) SetState(s *State) error {
	if s == nil {
		return fmt.Errorf("%w: nil state", ErrState)
	}
	v, ok := s.Scalars[localSGDStepKey]
	if !ok {
		return fmt.Errorf("%w: scalar %q missing (not the state of a PostLocalSGD)", ErrState, localSGDStepKey)
	}
	if v < 0 || v != math.Trunc(v) || v > math.MaxInt32 {
		return fmt.Errorf("%w: %s = %g is not a step count", ErrState, localSGDStepKey, v)
	}
	inner := &State{Kind: s.Kind, Scalars: make(map[string]float64, len(s.Scalars)), Tensors: s.Tensors}
	for k, x := range s.Scalars {
		if k != localSGDStepKey {
			inner.Scalars[k] = x
		}
	}
	if err := o.dist.SetState(inner); err != nil {
		return err
	}
	o.step = int(v)
	o.averaged = false
	return nil
}
