package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// The gradient reductions: the runtime's constants of the same names.
const (
	Average = hvd.Average // the mean over ranks (Horovod's default)
	Sum     = hvd.Sum     // the sum over ranks
	// Adasum combines the ranks' gradients with the Adasum rule (Maleki
	// et al., arXiv 2006.02924): orthogonal gradients add up, parallel
	// ones are averaged. The DistributedOptimizer applies it to the
	// gradients themselves (a plain Adasum allreduce before the wrapped
	// optimizer's step), not to the optimizer's parameter deltas as
	// Horovod's delta optimizer does; since Adasum adapts the effective
	// step to the agreement of the ranks, do not scale the learning rate
	// by the number of ranks. It needs float32 or float64 gradients (no
	// compression), no predivide factor, and, on the runtime, a power of
	// two ranks.
	Adasum = hvd.Adasum
)

// Compression is how gradients travel between ranks.
type Compression uint8

// The gradient compressions. FP16 and BF16 cast each gradient to the half
// type before the allreduce and back after it, halving the bytes moved at
// the cost of half-precision rounding (FP16 has a narrow range: use a
// GradientPredivideFactor to keep large sums finite).
const (
	NoCompression Compression = iota // gradients travel in their own type
	FP16                             // IEEE half precision
	BF16                             // bfloat16
)

// String returns the compression's name: none, fp16 or bf16.
func (c Compression) String() string {
	switch c {
	case NoCompression:
		return "none"
	case FP16:
		return "fp16"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("Compression(%d)", uint8(c))
}

// dtype returns the type gradients travel in under c, given their own.
func (c Compression) dtype(own tensor.DType) tensor.DType {
	switch c {
	case FP16:
		return tensor.Float16
	case BF16:
		return tensor.BFloat16
	}
	return own
}

// GroupCollectives is a Collectives that can also reduce several tensors
// as one unit (the runtime's grouped allreduce, which negotiates them
// together and fuses them where they fit). The DistributedOptimizer uses it
// for parameter groups when the Collectives provides it.
type GroupCollectives interface {
	Collectives
	// GroupedAllreduceAsync starts combining every tensor of ts in
	// place, under one name, with AllreduceAsync's scaling.
	GroupedAllreduceAsync(ts []*tensor.Tensor, name string, op tensor.ReduceOp, prescale, postscale float64) (Waiter, error)
}

// Waiter is the handle of an asynchronous collective.
type Waiter interface {
	// Wait blocks until the collective completes or ctx is done and
	// returns its error, or ctx's. Returning ctx's error means only that
	// the wait was abandoned: the collective may still be running (and
	// writing into its tensors), and Wait may be called again. Any other
	// return means that the collective has completed.
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
	AllreduceAsync(t *tensor.Tensor, name string, op tensor.ReduceOp, prescale, postscale float64) (Waiter, error)
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
	// ErrInFlight: the step is under way and only Step or Synchronize
	// may go on with it. ZeroGrad returns it once a gradient has been
	// reported this step (a reduction in flight, or waiting for more
	// passes or group members), and ZeroGrad and Ready return it after a
	// cancelled Synchronize or Step left the step's reductions in flight:
	// zeroing or rewriting the gradients then would race with the
	// reductions still writing into them, or lose what was reported.
	ErrInFlight = errors.New("optim: this step's gradients are reported or still being reduced; finish the step with Step or Synchronize first")
	// ErrGroups: parameter groups that name a parameter twice, name one
	// the optimizer does not hold, or are empty.
	ErrGroups = errors.New("optim: bad parameter groups")
)

// DistOption configures a DistributedOptimizer.
type DistOption func(*distConfig)

type distConfig struct {
	op        tensor.ReduceOp
	passes    int
	predivide float64
	comp      Compression
	groups    [][]string
	numGroups int
	flat      bool     // move the gradients into flat buffers (FlatGradients)
	bucket    int      // bytes per bucket (BucketBytes)
	order     []string // backward order (BackwardOrder); nil: reverse
	hook      CommHook // a user's or PowerSGD's (WithCommHook); nil: the built-in paths
}

// WithOp sets how gradients are combined (default Average).
func WithOp(op tensor.ReduceOp) DistOption { return func(c *distConfig) { c.op = op } }

// WithCompression sets how gradients travel (default NoCompression): it
// is WithCommHook(CompressionHook(c)), and replaces a hook given before.
func WithCompression(c Compression) DistOption {
	return func(cfg *distConfig) { cfg.comp, cfg.hook = c, nil }
}

// Groups reduces each listed set of parameters (by name) as one unit: a
// group's allreduce starts once every member's gradient is ready: as one
// held ReduceGroup where the Collectives is a ReduceGroupCollectives (the
// groups are then the buckets, and BucketBytes is ignored), else as one
// grouped allreduce where it is a GroupCollectives, else as one allreduce
// per member started together. Parameters in no group are
// reduced on their own. Fewer, larger reductions cost less negotiation;
// later starts overlap less with backward.
func Groups(groups ...[]string) DistOption {
	return func(c *distConfig) { c.groups, c.numGroups = groups, 0 }
}

// NumGroups splits the parameters, in the wrapped optimizer's order, into
// n groups of consecutive parameters as equal in count as possible (Horovod's
// num_groups); see Groups. n larger than the parameters gives one group per
// parameter.
func NumGroups(n int) DistOption { return func(c *distConfig) { c.numGroups, c.groups = n, nil } }

// BackwardPassesPerStep sets the number of backward passes whose gradients
// accumulate locally before one reduction (default 1). Gradients are summed
// over the passes, not averaged: scale the learning rate by passes as
// Horovod's examples do. A gradient's reduction starts at its n-th Ready;
// one reported fewer times (or never) is reduced at Step as it is, holding
// whatever the passes accumulated into it.
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
// Ready is only the overlap optimisation: Step reduces every gradient that
// was not reported during the step as it is, with its current value (as
// Horovod's synchronize() does), so a program that never calls Ready
// trains the same parameters, only without overlapping communication with
// backward. Every rank thus starts the same names, and no rank waits
// forever on a rank-dependent model; a parameter a rank did not use in
// this step takes part with whatever its gradient holds (zeros after
// ZeroGrad). With BackwardPassesPerStep n, a gradient reported fewer than
// n times (or never) is likewise reduced as it is, holding the sum of the
// passes that wrote it.
//
// Ready may be called from another goroutine than Step, but calls of one
// step must happen before that Step.
//
// # The runtime's cheapest path
//
// On a Collectives that holds reduce groups (ReduceGroupCollectives, such
// as FromRuntime's), the optimizer reduces the gradients in buckets of
// consecutive gradients in backward order (BucketBytes; or the Groups
// given), each a ReduceGroup prepared once, with its names held, started
// as soon as its last member is Ready. The runtime then finds each name by
// its cache bit and fuses small gradients: those that lie back to back in
// one buffer are reduced where they lie, others are copied through its
// fusion buffer. The gradients stay where the caller put them unless
// FlatGradients(true) moves them into one flat buffer per dtype, in
// backward order (Param.Grad keeps its tensor object, re-pointed at the
// buffer; PyTorch DDP's gradient_as_bucket_view), which saves that copy
// for a model that reaches its gradients through Param.Grad alone. Call
// Close when training ends to release the names. Everything else is
// the same on this path: the ops, predivide, BackwardPassesPerStep and
// cancellation; under compression the half-precision copies that travel
// are the flat buffer and the gradients stay where they are. On any other
// Collectives (a test's, an adapter's), each gradient is reduced on its
// own, or per group, as it is reported.
//
// # Communication hooks
//
// WithCommHook hands each bucket to a CommHook, which starts the bucket's
// collectives and, once every bucket's have completed, decodes the result
// into the gradients (see CommHook for how to write one, and PowerSGD).
// A user's hook gets buckets of consecutive gradients in backward order
// (BucketBytes, or the Groups given), over the gradients' own storage;
// the built-in AllreduceHook and CompressionHook are the paths above.
// Cancellation and ErrInFlight work the same: the hook's Waiter is one of
// the step's reductions.
//
// # Cancellation
//
// A reduction, once started, cannot be called back: the other ranks are
// committed to it, and it writes into the gradient when it completes. So
// when the context of Synchronize or StepContext ends before every
// reduction has completed, the call returns an error wrapping the
// context's, without stepping, and the optimizer keeps the unfinished
// step: its reductions stay in flight and are not forgotten. Until the step
// is finished, ZeroGrad and Ready refuse with ErrInFlight instead of
// touching gradients that are still being written. To go on, call
// Synchronize, StepContext or Step again: it waits for the reductions of
// the interrupted step (it does not start them again, which the runtime
// would refuse as duplicate names) and finishes the step, so that the
// parameters end as if nothing had been cancelled. A step cannot be
// abandoned while its reductions are in flight; shutting the runtime down
// fails them, and the next Synchronize then returns that failure and ends
// the step.
type DistributedOptimizer struct {
	inner Optimizer
	coll  Collectives
	cfg   distConfig
	index map[string]int
	units [][]int          // parameter indices reduced together
	unit  []int            // per parameter, its unit
	wire  []*tensor.Tensor // per parameter, what travels (the gradient, or its half-precision copy)
	// groups holds, per unit, its reduce group when the Collectives
	// provides them; nil on the per-gradient path.
	groups []ReduceGroup
	// ord is the parameters' backward order (Rebind holds new groups in
	// it).
	ord []int
	// stale holds, per moved gradient, its former storage until the
	// first step has checked that nothing wrote into it.
	stale [][]byte
	// hbuckets holds, per unit, what the hook sees of it (cfg.hook set).
	hbuckets []*Bucket

	mu          sync.Mutex
	count       []int      // times reported this step, per parameter
	pending     []int      // per unit, members not yet final this step
	started     []bool     // per unit, whether its reduction was started this step
	handles     [][]Waiter // per unit, reductions started and not yet seen to complete
	stepErr     error      // the first failure of this step's reductions
	interrupted bool       // a Synchronize of this step ended with reductions in flight
	closed      bool       // Close has released the groups
	steps       int        // steps finished without error (Bucket.Step)
}

var _ Optimizer = (*DistributedOptimizer)(nil)

// NewDistributed wraps inner, reducing gradients with coll. On a
// Collectives that holds reduce groups it prepares them (and with
// FlatGradients(true) moves the gradients into a flat buffer); call Close
// when done.
func NewDistributed(inner Optimizer, coll Collectives, opts ...DistOption) (*DistributedOptimizer, error) {
	cfg := distConfig{op: Average, passes: 1, predivide: 1, bucket: DefaultBucketBytes}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	params := inner.Params()
	if err := CheckParams(params); err != nil {
		return nil, err
	}
	d := &DistributedOptimizer{inner: inner, coll: coll, cfg: cfg, index: make(map[string]int, len(params)),
		count: make([]int, len(params)), unit: make([]int, len(params)), wire: make([]*tensor.Tensor, len(params))}
	for i, p := range params {
		d.index[p.Name] = i
		d.wire[i] = p.Grad
	}
	ord, err := d.backwardOrder(params)
	if err != nil {
		return nil, err
	}
	d.ord = ord
	gc, held := coll.(ReduceGroupCollectives)
	held = held && cfg.hook == nil
	if held {
		d.layout(params, ord)
	} else {
		for i, p := range params {
			if dt := cfg.comp.dtype(p.Grad.DType()); dt != p.Grad.DType() {
				d.wire[i] = tensor.New(dt, p.Grad.Shape()...)
			}
		}
	}
	var units [][]int
	if (held || cfg.hook != nil) && cfg.groups == nil && cfg.numGroups == 0 {
		units = d.buckets(ord)
	} else if units, err = d.makeUnits(params); err != nil {
		return nil, err
	}
	d.units = units
	for u, members := range units {
		for _, i := range members {
			d.unit[i] = u
		}
	}
	if held {
		if err := d.hold(gc, params, ord); err != nil {
			return nil, err
		}
	}
	if cfg.hook != nil {
		d.makeBuckets(params, ord)
	}
	d.pending = make([]int, len(units))
	d.started = make([]bool, len(units))
	d.handles = make([][]Waiter, len(units))
	d.resetPending()
	return d, nil
}

// check refuses an option set the DistributedOptimizer cannot serve: an
// unsupported op or compression, a bad predivide factor, pass count,
// group count or bucket size, or a hook that refuses the op.
func (cfg distConfig) check() error {
	switch {
	case cfg.op != Average && cfg.op != Sum && cfg.op != Adasum:
		return fmt.Errorf("optim: DistributedOptimizer: unsupported op %v (Average, Sum or Adasum)", cfg.op)
	case cfg.passes < 1:
		return fmt.Errorf("optim: DistributedOptimizer: backward passes per step %d must be > 0", cfg.passes)
	case !(cfg.predivide > 0) || math.IsInf(cfg.predivide, 0):
		return fmt.Errorf("optim: DistributedOptimizer: gradient predivide factor %g must be positive", cfg.predivide)
	case cfg.predivide != 1 && cfg.op != Average:
		return fmt.Errorf("optim: DistributedOptimizer: gradient predivide factor needs op Average, not %v", cfg.op)
	case cfg.comp > BF16:
		return fmt.Errorf("optim: DistributedOptimizer: unsupported compression %v", cfg.comp)
	case cfg.comp != NoCompression && cfg.op == Adasum:
		return fmt.Errorf("optim: DistributedOptimizer: Adasum needs float32 or float64 gradients, not %v compression", cfg.comp)
	case cfg.numGroups < 0:
		return fmt.Errorf("%w: %d groups", ErrGroups, cfg.numGroups)
	case cfg.bucket < 0:
		return fmt.Errorf("optim: DistributedOptimizer: bucket size %d bytes must not be negative", cfg.bucket)
	}
	if oc, ok := cfg.hook.(interface {
		checkOp(tensor.ReduceOp, float64) error
	}); ok {
		return oc.checkOp(cfg.op, cfg.predivide)
	}
	return nil
}

// makeUnits turns the group options into units of parameter indices: the
// groups, in the order given, then every other parameter on its own.
func (d *DistributedOptimizer) makeUnits(params []Param) ([][]int, error) {
	groups := d.cfg.groups
	if n := d.cfg.numGroups; n > 0 {
		n = min(n, len(params))
		groups = make([][]string, n)
		for g := range n {
			for _, p := range params[g*len(params)/n : (g+1)*len(params)/n] {
				groups[g] = append(groups[g], p.Name)
			}
		}
	}
	var units [][]int
	grouped := make([]bool, len(params))
	for g, names := range groups {
		if len(names) == 0 {
			return nil, fmt.Errorf("%w: group %d is empty", ErrGroups, g)
		}
		members := make([]int, 0, len(names))
		for _, name := range names {
			i, ok := d.index[name]
			switch {
			case !ok:
				return nil, fmt.Errorf("%w: group %d names %q, which is not a parameter", ErrGroups, g, name)
			case grouped[i]:
				return nil, fmt.Errorf("%w: parameter %q is in more than one group (or twice in one)", ErrGroups, name)
			}
			grouped[i] = true
			members = append(members, i)
		}
		units = append(units, members)
	}
	for i := range params {
		if !grouped[i] {
			units = append(units, []int{i})
		}
	}
	return units, nil
}

func (d *DistributedOptimizer) resetPending() {
	for u, members := range d.units {
		d.pending[u] = len(members)
	}
}

// Ready reports that p's gradient is final for this backward pass. After
// the last of BackwardPassesPerStep passes it starts the gradient's
// allreduce (or, for a grouped parameter, once the whole group is final,
// the group's). After a cancelled Synchronize or Step it returns
// ErrInFlight until the step is finished (see Cancellation).
func (d *DistributedOptimizer) Ready(p Param) error { return d.GradReady(p.Name) }

// GradReady is Ready by parameter name.
func (d *DistributedOptimizer) GradReady(name string) error {
	i, ok := d.index[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownParam, name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("%w (gradient of %q reported)", ErrClosed, name)
	}
	if d.interrupted {
		return fmt.Errorf("%w (gradient of %q reported%s)", ErrInFlight, name, interruptedHint)
	}
	if d.count[i] >= d.cfg.passes {
		return fmt.Errorf("%w (parameter %q, %d passes)", ErrTooManyPasses, name, d.cfg.passes)
	}
	d.count[i]++
	// A gradient written to its former storage fails the step, but its
	// reduction still starts: the other ranks wait for it.
	stale := d.checkMoved(i)
	if stale != nil && d.stepErr == nil {
		d.stepErr = stale
	}
	if d.count[i] < d.cfg.passes {
		return stale
	}
	u := d.unit[i]
	if d.pending[u]--; d.pending[u] == 0 {
		if err := d.start(u); err != nil {
			return err
		}
	}
	return stale
}

// unitName is the collective name of unit u: its parameter's name, or
// for a group of several, "group." and the first member's.
func (d *DistributedOptimizer) unitName(u int) string {
	members := d.units[u]
	name := d.inner.Params()[members[0]].Name
	if len(members) > 1 {
		return "group." + name
	}
	return name
}

// interruptedHint completes the errors of calls refused after a cancelled
// Synchronize.
const interruptedHint = " while a cancelled Synchronize or Step left this step's reductions in flight: " +
	"call Synchronize, StepContext or Step again to finish the step"

// start launches unit u's reduction and marks the unit started; a failure
// becomes the step's error too. d.mu is held.
func (d *DistributedOptimizer) start(u int) error {
	d.started[u] = true
	err := d.launch(u)
	if err != nil && d.stepErr == nil {
		d.stepErr = err
	}
	return err
}

// scales returns the pre- and postscale of every reduction.
func (d *DistributedOptimizer) scales() (pre, post float64) {
	if d.cfg.predivide != 1 {
		return 1 / d.cfg.predivide, d.cfg.predivide
	}
	return 1, 1
}

// launch starts unit u's reductions, recording their handles (those
// started before a failure too: they are in flight).
func (d *DistributedOptimizer) launch(u int) error {
	params := d.inner.Params()
	pre, post := d.scales()
	if d.cfg.hook != nil {
		b := d.hbuckets[u]
		b.Step, b.Op, b.Prescale, b.Postscale = d.steps, d.cfg.op, pre, post
		w, err := d.cfg.hook.Start(d.coll, b)
		if w != nil {
			d.handles[u] = []Waiter{w}
		}
		if err != nil {
			return fmt.Errorf("optim: communication hook on the gradients of %q: %w", b.Name, err)
		}
		return nil
	}
	members := d.units[u]
	for _, i := range members {
		if d.wire[i] != params[i].Grad {
			compress(d.wire[i], params[i].Grad)
		}
	}
	if d.groups != nil {
		h, err := d.groups[u].Start()
		if err != nil {
			return fmt.Errorf("optim: allreduce of the gradients of %q: %w", d.unitName(u), err)
		}
		d.handles[u] = []Waiter{h}
		return nil
	}
	if gc, ok := d.coll.(GroupCollectives); ok && len(members) > 1 {
		ts := make([]*tensor.Tensor, len(members))
		for k, i := range members {
			ts[k] = d.wire[i]
		}
		h, err := gc.GroupedAllreduceAsync(ts, d.unitName(u), d.cfg.op, pre, post)
		if err != nil {
			return fmt.Errorf("optim: grouped allreduce of the gradients of %q: %w", d.unitName(u), err)
		}
		d.handles[u] = []Waiter{h}
		return nil
	}
	hs := make([]Waiter, 0, len(members))
	for _, i := range members {
		h, err := d.coll.AllreduceAsync(d.wire[i], params[i].Name, d.cfg.op, pre, post)
		if err != nil {
			d.handles[u] = hs
			return fmt.Errorf("optim: allreduce of the gradient of %q: %w", params[i].Name, err)
		}
		hs = append(hs, h)
	}
	d.handles[u] = hs
	return nil
}

// compress writes grad, rounded, into the half-precision tensor w.
func compress(w, grad *tensor.Tensor) {
	var f32 []float32
	if grad.DType() == tensor.Float32 {
		f32 = grad.Float32s()
	} else {
		f32 = make([]float32, grad.Len())
		for k, v := range grad.Float64s() {
			f32[k] = float32(v)
		}
	}
	switch w.DType() {
	case tensor.Float16:
		tensor.Float32ToFloat16(tensor.View[tensor.Float16Bits](w), f32)
	case tensor.BFloat16:
		tensor.Float32ToBFloat16(tensor.View[tensor.BFloat16Bits](w), f32)
	}
}

// decompress writes the half-precision tensor w back into grad.
func decompress(grad, w *tensor.Tensor) {
	var f32 []float32
	if grad.DType() == tensor.Float32 {
		f32 = grad.Float32s()
	} else {
		f32 = make([]float32, grad.Len())
	}
	switch w.DType() {
	case tensor.Float16:
		tensor.Float16ToFloat32(f32, tensor.View[tensor.Float16Bits](w))
	case tensor.BFloat16:
		tensor.BFloat16ToFloat32(f32, tensor.View[tensor.BFloat16Bits](w))
	}
	if grad.DType() == tensor.Float64 {
		for k, v := range f32 {
			grad.Float64s()[k] = float64(v)
		}
	}
}

// Synchronize starts the reduction of every gradient not yet started, with
// its current value (a gradient reported fewer times than the backward
// passes per step, or never, is reduced as it is), waits for all of them,
// and readies the optimizer for the next step. Step calls it.
//
// If ctx ends first, Synchronize returns an error wrapping ctx's and keeps
// the step unfinished, its reductions in flight; calling Synchronize (or
// StepContext, or Step) again waits for them and finishes the step (see
// Cancellation in the type's documentation). If a reduction failed,
// Synchronize returns the first failure once every reduction of the step
// has completed, and the next step starts afresh.
func (d *DistributedOptimizer) Synchronize(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	params := d.inner.Params()
	for i := range params {
		if err := d.checkMoved(i); err != nil && d.stepErr == nil {
			d.stepErr = err
		}
	}
	for u := range d.units {
		if !d.started[u] {
			d.start(u) // a failure is the step's error
		}
	}
	inFlight, firstLeft := 0, -1
	for u, hs := range d.handles {
		left := hs[:0]
		for _, h := range hs {
			err := h.Wait(ctx)
			switch {
			case err == nil:
			case ctx.Err() != nil && errors.Is(err, ctx.Err()):
				// Only the wait was abandoned: the reduction may still
				// write into the gradients.
				left = append(left, h)
			case d.stepErr == nil:
				d.stepErr = fmt.Errorf("optim: allreduce of the gradients of %q: %w", d.unitName(u), err)
			}
		}
		if len(left) == 0 {
			left = nil
		} else if firstLeft < 0 {
			firstLeft = u
		}
		d.handles[u] = left
		inFlight += len(left)
	}
	if inFlight > 0 {
		d.interrupted = true
		return fmt.Errorf("optim: Synchronize: %d reductions of this step still in flight (the first of %q): %w; "+
			"the step is kept: call Synchronize, StepContext or Step again to finish it",
			inFlight, d.unitName(firstLeft), ctx.Err())
	}
	err := d.stepErr
	if err == nil {
		for i, w := range d.wire {
			if w != params[i].Grad {
				decompress(params[i].Grad, w)
			}
		}
		if d.cfg.hook != nil {
			for _, b := range d.hbuckets {
				if ferr := d.cfg.hook.Finish(b); ferr != nil && err == nil {
					err = fmt.Errorf("optim: communication hook finishing the gradients of %q: %w", b.Name, ferr)
				}
			}
		}
	}
	if err == nil {
		d.steps++
	}
	d.endStep()
	return err
}

// endStep forgets the step whose reductions have all completed; d.mu is
// held.
func (d *DistributedOptimizer) endStep() {
	clear(d.started)
	clear(d.handles)
	clear(d.count)
	d.resetPending()
	d.stepErr, d.interrupted = nil, false
}

// Step synchronizes the gradients (see Synchronize) and runs the wrapped
// optimizer's step. After a cancelled StepContext or Synchronize, Step
// finishes the interrupted step (it waits for the reductions still in
// flight) and steps once.
func (d *DistributedOptimizer) Step() error { return d.StepContext(context.Background()) }

// StepContext is Step with a context for the waits. If ctx ends before
// the reductions complete, it returns an error wrapping ctx's without
// running the wrapped optimizer's step, and keeps the step unfinished;
// calling StepContext or Step again finishes it and steps once (see
// Cancellation in the type's documentation).
func (d *DistributedOptimizer) StepContext(ctx context.Context) error {
	if err := d.Synchronize(ctx); err != nil {
		return err
	}
	return d.inner.Step()
}

// startedErr is ErrInFlight, naming the call, when some unit's reduction
// was started this step; d.mu is held.
func (d *DistributedOptimizer) startedErr(call string) error {
	hint := ""
	if d.interrupted {
		hint = interruptedHint
	}
	for u, started := range d.started {
		if started {
			return fmt.Errorf("%w (%s called: the reduction of %q was started this step%s)", ErrInFlight, call, d.unitName(u), hint)
		}
	}
	return nil
}

// ZeroGrad zeroes the gradients. It fails with ErrInFlight once any
// gradient has been reported this step (a reduction in flight, a group
// waiting for its other members, or passes still accumulating), and after a
// cancelled Synchronize or Step until the step is finished: zeroing then
// would race with the reductions or lose what was reported. Zero before
// backward, or after Step or Synchronize has finished the step.
func (d *DistributedOptimizer) ZeroGrad() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.startedErr("ZeroGrad"); err != nil {
		return err
	}
	for i, n := range d.count {
		if n > 0 {
			return fmt.Errorf("%w (ZeroGrad called: %q reported %d of %d passes)", ErrInFlight, d.inner.Params()[i].Name, n, d.cfg.passes)
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

// State returns the wrapped optimizer's state, and with a StatefulHook
// (such as PowerSGD) the hook's too: its scalars and tensors under its
// prefix, and the steps finished (scalar prefix+"step").
func (d *DistributedOptimizer) State() *State {
	s := d.inner.State()
	sh, ok := d.cfg.hook.(StatefulHook)
	if !ok {
		return s
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	hs := sh.HookState()
	for k, v := range hs.Scalars {
		s.Scalars[k] = v
	}
	for k, t := range hs.Tensors {
		s.Tensors[k] = t
	}
	s.Scalars[sh.StatePrefix()+"step"] = float64(d.steps)
	return s
}

// SetState sets the wrapped optimizer's state, and with a StatefulHook the
// hook's (see State). It fails with ErrInFlight while a step is under
// way.
func (d *DistributedOptimizer) SetState(s *State) error {
	sh, ok := d.cfg.hook.(StatefulHook)
	if !ok || s == nil {
		return d.inner.SetState(s)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.startedErr("SetState"); err != nil {
		return err
	}
	for i, n := range d.count {
		if n > 0 {
			return fmt.Errorf("%w (SetState called: %q reported this step)", ErrInFlight, d.inner.Params()[i].Name)
		}
	}
	prefix := sh.StatePrefix()
	inner, hs := hookState(s, prefix)
	step, ok := hs.Scalars[prefix+"step"]
	if !ok || step < 0 || step != math.Trunc(step) {
		return fmt.Errorf("%w: scalar %q missing or not a step count", ErrState, prefix+"step")
	}
	delete(hs.Scalars, prefix+"step")
	// Check the hook's part before changing anything.
	old := sh.HookState()
	if err := sh.SetHookState(hs); err != nil {
		return err
	}
	if err := d.inner.SetState(inner); err != nil {
		_ = sh.SetHookState(old)
		return err
	}
	d.steps = int(step)
	return nil
}

// Unwrap returns the wrapped optimizer.
func (d *DistributedOptimizer) Unwrap() Optimizer { return d.inner }

// BroadcastParameters copies root's parameter values to every rank, in
// place, broadcasting them in name order (call it on every rank after
// building the model, so that all ranks start from the same weights).
//
// If ctx ends first, the broadcasts already started go on and write into the
// parameters when the other ranks reach them; treat that error as the end
// of the job (shut the runtime down) rather than reading or training the
// parameters.
func BroadcastParameters(ctx context.Context, c Collectives, params []Param, root int) error {
	ts := make(map[string]*tensor.Tensor, len(params))
	for _, p := range params {
		ts[p.Name] = p.Value
	}
	return broadcastAll(ctx, c, ts, root, "param.")
}

// BroadcastState copies root's optimizer state (buffers and scalar
// hyper-parameters, learning rate and step count included) to every rank.
// The optimizers must be of the same kind over the same parameters. If ctx
// ends first, it fails as BroadcastParameters does, without setting the
// state.
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
