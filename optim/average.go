package optim

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gohorovod/gohorovod/tensor"
)

// ErrAveraging is returned (wrapped) by the constructors of a ModelAverager
// or a PostLocalSGD given invalid settings.
var ErrAveraging = errors.New("optim: invalid model averaging settings")

// AveragingLevel is one level of (hierarchical) model averaging: every
// Period steps, the ranks of Coll average their parameters.
type AveragingLevel struct {
	// Period is the number of steps between two averagings at this
	// level (at least 1).
	Period int
	// Coll holds the ranks that average together at this level: the
	// ranks of one node (FromProcessSet with the node's set; see
	// hvd.Runtime.AddNodeProcessSets), or every rank (FromRuntime).
	Coll Collectives
}

// AveragerOption configures a ModelAverager.
type AveragerOption func(*averagerConfig)

type averagerConfig struct {
	warmup int
	state  Optimizer // whose state tensors are averaged too, or nil
}

// WarmupSteps makes the averager skip the first n steps (default 0): it
// averages after step n+Period, n+2·Period, ... (PyTorch's warmup_steps;
// see ModelAverager.Due).
func WarmupSteps(n int) AveragerOption { return func(c *averagerConfig) { c.warmup = n } }

// AverageState makes the averager average opt's state tensors too (the
// momentum buffers of SGD, the moments of Adam: every tensor of its
// State) each time it averages the parameters, so that the ranks'
// optimizers agree as well as their models. Scalars (the learning rate,
// the step count) are left alone: they agree across ranks already.
func AverageState(opt Optimizer) AveragerOption { return func(c *averagerConfig) { c.state = opt } }

// ModelAverager averages model parameters across ranks periodically, as
// PyTorch's PeriodicModelAverager and HierarchicalModelAverager do for
// local SGD: the ranks step on their own gradients and, every Period steps,
// replace their parameters by the mean over the ranks, in place, with one
// grouped allreduce (Average) of every parameter tensor (and, with
// AverageState, of every optimizer state tensor).
//
// With several levels (NewHierarchicalAverager), each step that is due
// averages at the level of the largest period that divides it: within each
// node every k1 steps, say, and across every rank every k2 steps (k2 a
// multiple of k1), the global averaging taking the place of the node's
// when both are due.
//
// Every rank must call Average with the same steps. A ModelAverager is used
// by one goroutine at a time.
//
// # Cancellation
//
// If the context of Average ends before the allreduce completes, Average
// returns an error wrapping the context's; the allreduce goes on and
// writes into the parameters when the other ranks reach it. The next
// Average, or Wait, waits for it and finishes it first (with AverageState,
// the averaged state is set then), so that the parameters end as if
// nothing had been cancelled.
type ModelAverager struct {
	params []Param
	levels []AveragingLevel
	cfg    averagerConfig

	// The averaging in flight after a cancelled wait: its handles, and
	// the state whose tensors it averages (nil without AverageState).
	pending      []Waiter
	pendingState *State
	pendingLevel int
}

// NewModelAverager returns an averager of params over coll's ranks every
// period steps (PyTorch's PeriodicModelAverager).
func NewModelAverager(coll Collectives, params []Param, period int, opts ...AveragerOption) (*ModelAverager, error) {
	return NewHierarchicalAverager(params, []AveragingLevel{{Period: period, Coll: coll}}, opts...)
}

// NewHierarchicalAverager returns an averager of params at several levels
// (PyTorch's HierarchicalModelAverager with its period_group_size_dict):
// levels in ascending order of period, each period a multiple of the one
// before, the last level normally every rank. For example, within each
// node every 2 steps and across all ranks every 8:
//
//	avg, err := optim.NewHierarchicalAverager(params, []optim.AveragingLevel{
//		{Period: 2, Coll: nodeColl}, // optim.FromProcessSet(r, node)
//		{Period: 8, Coll: allColl},  // optim.FromRuntime(r)
//	})
func NewHierarchicalAverager(params []Param, levels []AveragingLevel, opts ...AveragerOption) (*ModelAverager, error) {
	var cfg averagerConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := CheckParams(params); err != nil {
		return nil, err
	}
	if cfg.warmup < 0 {
		return nil, fmt.Errorf("%w: warmup steps %d must be >= 0", ErrAveraging, cfg.warmup)
	}
	if err := checkLevels(levels); err != nil {
		return nil, err
	}
	return &ModelAverager{params: append([]Param(nil), params...), levels: append([]AveragingLevel(nil), levels...), cfg: cfg}, nil
}

// checkLevels validates averaging levels.
func checkLevels(levels []AveragingLevel) error {
	if len(levels) == 0 {
		return fmt.Errorf("%w: no averaging level", ErrAveraging)
	}
	for i, l := range levels {
		switch {
		case l.Period < 1:
			return fmt.Errorf("%w: averaging period %d must be >= 1", ErrAveraging, l.Period)
		case l.Coll == nil:
			return fmt.Errorf("%w: averaging level %d (period %d) has no Collectives", ErrAveraging, i, l.Period)
		case i > 0 && (l.Period <= levels[i-1].Period || l.Period%levels[i-1].Period != 0):
			return fmt.Errorf("%w: averaging period %d is not a larger multiple of the period %d before it", ErrAveraging, l.Period, levels[i-1].Period)
		}
	}
	return nil
}

// Due returns the level (an index into the averager's levels, 0 for a
// periodic averager) at which Average averages after step, or -1 if it
// does not. step counts the optimizer steps taken so far, from 1: the
// averager averages after steps warmup+k·P, k ≥ 1, for each level's period
// P, at the level of the largest such P. (PyTorch's averagers count from 0
// and average right after the warmup too; here the first averaging comes
// one period after it.)
func (a *ModelAverager) Due(step int) int {
	k := step - a.cfg.warmup
	if k < 1 {
		return -1
	}
	for i := len(a.levels) - 1; i >= 0; i-- {
		if k%a.levels[i].Period == 0 {
			return i
		}
	}
	return -1
}

// Levels returns the averager's levels; the caller must not modify them.
func (a *ModelAverager) Levels() []AveragingLevel { return a.levels }

// Average averages the parameters (and, with AverageState, the optimizer
// state) if step is due (see Due), and waits for the allreduce. Call it
// after the optimizer's step-th step, on every rank. It first finishes an
// averaging left in flight by a cancelled call (see Cancellation).
func (a *ModelAverager) Average(ctx context.Context, step int) error {
	if err := a.Wait(ctx); err != nil {
		return err
	}
	level := a.Due(step)
	if level < 0 {
		return nil
	}
	return a.AverageNow(ctx, level)
}

// AverageNow averages at the given level now, whatever the step (after
// finishing an averaging left in flight).
func (a *ModelAverager) AverageNow(ctx context.Context, level int) error {
	if err := a.Wait(ctx); err != nil {
		return err
	}
	if level < 0 || level >= len(a.levels) {
		return fmt.Errorf("optim: ModelAverager: no averaging level %d (%d levels)", level, len(a.levels))
	}
	coll := a.levels[level].Coll
	if coll.Size() == 1 {
		return nil
	}
	ts := make([]*tensor.Tensor, 0, len(a.params))
	for _, p := range a.params {
		ts = append(ts, p.Value)
	}
	var s *State
	if a.cfg.state != nil {
		s = a.cfg.state.State()
		for _, k := range s.Names() {
			ts = append(ts, s.Tensors[k])
		}
	}
	name := "model_average." + strconv.Itoa(level)
	var hs []Waiter
	if gc, ok := coll.(GroupCollectives); ok {
		h, err := gc.GroupedAllreduceAsync(ts, name, Average, 1, 1)
		if err != nil {
			return fmt.Errorf("optim: model averaging (level %d): %w", level, err)
		}
		hs = []Waiter{h}
	} else {
		for i, t := range ts {
			h, err := coll.AllreduceAsync(t, name+"."+strconv.Itoa(i), Average, 1, 1)
			if err != nil {
				// Those started are in flight: keep them to wait for.
				a.pending, a.pendingState, a.pendingLevel = hs, nil, level
				werr := a.Wait(context.Background())
				return errors.Join(fmt.Errorf("optim: model averaging (level %d): %w", level, err), werr)
			}
			hs = append(hs, h)
		}
	}
	a.pending, a.pendingState, a.pendingLevel = hs, s, level
	return a.Wait(ctx)
}

// Wait waits for an averaging left in flight by a cancelled Average and
// finishes it; it returns nil at once if there is none. If ctx ends first,
// it returns an error wrapping ctx's and the averaging stays in flight.
func (a *ModelAverager) Wait(ctx context.Context) error {
	var first error
	left := a.pending[:0]
	for _, h := range a.pending {
		err := h.Wait(ctx)
		switch {
		case err == nil:
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			left = append(left, h)
		case first == nil:
			first = fmt.Errorf("optim: model averaging (level %d): %w", a.pendingLevel, err)
		}
	}
	if len(left) > 0 {
		a.pending = left
		return fmt.Errorf("optim: model averaging (level %d) still in flight: %w; call Average or Wait again to finish it", a.pendingLevel, ctx.Err())
	}
	s := a.pendingState
	a.pending, a.pendingState = nil, nil
	if first != nil {
		return first
	}
	if s != nil {
		if err := a.cfg.state.SetState(s); err != nil {
			return fmt.Errorf("optim: model averaging: setting the averaged optimizer state: %w", err)
		}
	}
	return nil
}
