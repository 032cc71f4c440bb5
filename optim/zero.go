package optim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gohorovod/gohorovod/tensor"
)

// ZeroConfig configures the sharded optimizer.
type ZeroConfig struct {
	// Stage is ZeRO's stage: 1 shards the optimizer state (the gradients
	// are allreduced, each rank updates its range, the ranks allgather
	// the new values); 2 also shards the gradients' reduction (each rank
	// receives, during backward, the others' gradients for its range
	// only).
	Stage int
}

// ErrShapeChanged is returned (wrapped, with the tensor and the shapes)
// by the sharded optimizer's SetState when a state tensor fits neither its
// parameter's shape nor this rank's piece of it: the state was made for a
// parameter of another shape, and cutting it into this job's ranges
// would mix up elements.
var ErrShapeChanged = errors.New("optim: Zero: a parameter's state has another shape than the parameter")

// Zero is a sharded data-parallel optimizer (ZeRO, Rajbhandari et al.,
// stages 1 and 2; PyTorch's ZeroRedundancyOptimizer): the parameters, as
// one flat space in their order, are cut into Size equal element ranges
// (ShardRange; the first N mod Size ranges one element longer), rank r
// owning range r, whatever the parameters' boundaries, so that one large
// tensor is spread over every rank too. The wrapped optimizer (any
// elementwise one: SGD, Adam, AdamW, RMSprop, Adagrad) is made over views
// of this rank's range only, so it holds about 1/Size of the state. Each
// Step averages the gradients (stage 1: allreduce; stage 2:
// each gradient's parts sent to their owners by an alltoall as soon as
// backward reports it Ready, each rank receiving its range's mean: a
// reduce-scatter overlapped with backward), steps the wrapped
// optimizer on the range, then allgathers the ranges, so that every rank
// ends with the parameters that the DistributedOptimizer over the
// unsharded optimizer gives. After a stage-2 step only this rank's range
// of the gradients holds the mean; the rest keeps this rank's own
// gradients (at stage 1 every gradient holds the mean).
//
// State returns this rank's shard (tensors keyed by parameter name, each
// the 1-D piece of the range in that parameter); ConsolidateState gathers
// the full state, in the unsharded optimizer's format, and SetState takes
// either this rank's shard or a full state, which it cuts at this job's
// size (re-sharding a checkpoint made at another size, or by the
// unsharded optimizer).
//
// It needs a Collectives with Rank and Allgather (FromRuntime's), and
// Alltoall for stage 2; the parameters must share one dtype.
type Zero struct {
	cfg        ZeroConfig
	coll       Collectives
	gc         GatherCollectives
	rank, size int
	name       string // prefix of the collectives' names

	params []Param
	shapes []tensor.Shape
	offs   []int // flat offset of each parameter
	n      int   // elements in all
	lo, hi int   // this rank's range
	pieces []zeroPiece
	inner  Optimizer
	// flight holds, at stage 2, the reduction in flight of each
	// parameter's gradient (started by Ready or Step), or nil.
	flight []Waiter
}

// zeroPiece is the part of one parameter in a rank's range: elements
// [a, b) of parameter param.
type zeroPiece struct{ param, a, b int }

// zeroPieces returns the pieces of the flat range [lo, hi) over
// parameters of the given element counts, laid out in order.
func zeroPieces(counts []int, lo, hi int) []zeroPiece {
	var ps []zeroPiece
	off := 0
	for i, c := range counts {
		a, b := max(lo-off, 0), min(hi-off, c)
		if a < b {
			ps = append(ps, zeroPiece{i, a, b})
		}
		off += c
	}
	return ps
}

// NewZero returns the sharded optimizer over params on coll: newInner
// makes the wrapped optimizer over the parameters it is given (the views
// of this rank's range), e.g.
//
//	func(ps []optim.Param) (optim.Optimizer, error) { return optim.NewAdam(ps, cfg) }
func NewZero(params []Param, coll Collectives, newInner func([]Param) (Optimizer, error), cfg ZeroConfig) (*Zero, error) {
	if cfg.Stage != 1 && cfg.Stage != 2 {
		return nil, fmt.Errorf("optim: Zero: stage %d; ZeRO stages 1 and 2 are built", cfg.Stage)
	}
	if err := CheckParams(params); err != nil {
		return nil, err
	}
	gc, ok := coll.(GatherCollectives)
	rank, ok2 := rankOf(coll)
	_, ok3 := coll.(AlltoallCollectives)
	if !ok || !ok2 || (cfg.Stage == 2 && !ok3) {
		return nil, fmt.Errorf("optim: Zero stage %d needs a Collectives with Rank, Allgather and (stage 2) Alltoall, as FromRuntime's; %T lacks one", cfg.Stage, coll)
	}
	z := &Zero{cfg: cfg, coll: coll, gc: gc, rank: rank, size: coll.Size(), name: "zero." + params[0].Name,
		params: slices.Clone(params)}
	counts := make([]int, len(params))
	for i, p := range params {
		if p.Value.DType() != params[0].Value.DType() {
			return nil, fmt.Errorf("optim: Zero: parameter %q is %v and %q is %v: the flat parameter space needs one dtype", params[0].Name, params[0].Value.DType(), p.Name, p.Value.DType())
		}
		z.shapes = append(z.shapes, p.Value.Shape().Clone())
		z.offs = append(z.offs, z.n)
		counts[i] = p.Value.Len()
		z.n += counts[i]
	}
	if z.n < z.size {
		return nil, fmt.Errorf("optim: Zero: %d parameter elements cannot be shared by %d ranks", z.n, z.size)
	}
	z.lo, z.hi = ShardRange(z.n, z.size, rank)
	z.flight = make([]Waiter, len(params))
	z.pieces = zeroPieces(counts, z.lo, z.hi)
	inner, err := newInner(z.views())
	if err != nil {
		return nil, err
	}
	z.inner = inner
	return z, nil
}

// views returns the Params of this rank's pieces: 1-D views of the
// parameters' values and gradients, under the parameters' names.
func (z *Zero) views() []Param {
	ps := make([]Param, len(z.pieces))
	for k, pc := range z.pieces {
		p := z.params[pc.param]
		ps[k] = Param{Name: p.Name, Value: elems(p.Value, pc.a, pc.b), Grad: elems(p.Grad, pc.a, pc.b)}
	}
	return ps
}

// elems returns elements [a, b) of t as a 1-D tensor sharing t's storage.
func elems(t *tensor.Tensor, a, b int) *tensor.Tensor {
	es := t.DType().Size()
	v, err := tensor.FromBytes(t.DType(), t.Bytes()[a*es:b*es])
	if err != nil {
		panic("optim: Zero: " + err.Error()) // a and b are within t
	}
	return v
}

// Params returns the parameters, all of them, in their order.
func (z *Zero) Params() []Param { return z.params }

// Inner returns the wrapped optimizer, over this rank's views.
func (z *Zero) Inner() Optimizer { return z.inner }

// Range returns this rank's range of the flat parameter space.
func (z *Zero) Range() (lo, hi int) { return z.lo, z.hi }

// ZeroGrad sets every gradient to zero; it fails with ErrInFlight while
// a stage-2 reduction started by Ready is in flight.
func (z *Zero) ZeroGrad() error {
	for _, w := range z.flight {
		if w != nil {
			return ErrInFlight
		}
	}
	ZeroGrads(z.params)
	return nil
}

// Ready reports that backward has finished p's gradient. At stage 2 it
// starts the gradient's reduction to the owners of its elements, so that
// it overlaps the rest of backward; at stage 1 the gradients travel
// together at Step. A gradient not reported is reduced at Step.
func (z *Zero) Ready(p Param) error {
	if z.cfg.Stage != 2 {
		return nil
	}
	for i, q := range z.params {
		if q.Name == p.Name {
			_, err := z.startGrad(i)
			return err
		}
	}
	return fmt.Errorf("%w: %q", ErrUnknownParam, p.Name)
}

// Close does nothing: Zero holds nothing on the Collectives.
func (z *Zero) Close() error { return nil }

// LR returns the wrapped optimizer's learning rate.
func (z *Zero) LR() float64 { return z.inner.LR() }

// SetLR sets the wrapped optimizer's learning rate.
func (z *Zero) SetLR(lr float64) { z.inner.SetLR(lr) }

// Step is StepContext without a deadline.
func (z *Zero) Step() error { return z.StepContext(context.Background()) }

// StepContext averages the gradients, steps this rank's range and
// gathers every range's new values. Every rank must call it. If ctx ends
// first, collectives already started go on: treat the error as the end of
// the job.
func (z *Zero) StepContext(ctx context.Context) error {
	if err := z.reduceGrads(ctx); err != nil {
		return err
	}
	if err := z.inner.Step(); err != nil {
		return err
	}
	return z.gather(ctx)
}

// reduceGrads leaves in this rank's pieces of the gradients the mean over
// ranks (stage 1: of every gradient, by allreduce; stage 2: of this
// range only, each gradient's parts sent to their owners by an alltoall,
// started by Ready or here).
func (z *Zero) reduceGrads(ctx context.Context) error {
	if z.cfg.Stage == 1 {
		grads := make([]*tensor.Tensor, len(z.params))
		for i, p := range z.params {
			grads[i] = p.Grad
		}
		w, err := allreduceAll(z.coll, grads, z.name+".grads", Average, 1, 1)
		if err != nil {
			if w != nil {
				w.Wait(context.Background())
			}
			return err
		}
		return w.Wait(ctx)
	}
	return z.reduceStage2(ctx)
}

// copyRange copies between seg (this rank's range, flat) and the pieces
// of what pick returns of each parameter: into the pieces when in is set,
// else out of them.
func (z *Zero) copyRange(seg *tensor.Tensor, pick func(Param) *tensor.Tensor, in bool) {
	off := 0
	for _, pc := range z.pieces {
		dst := elems(pick(z.params[pc.param]), pc.a, pc.b).Bytes()
		src := elems(seg, off, off+pc.b-pc.a).Bytes()
		if !in {
			dst, src = src, dst
		}
		copy(dst, src)
		off += pc.b - pc.a
	}
}

// gather allgathers every rank's range of the parameters' values into
// every parameter.
func (z *Zero) gather(ctx context.Context) error {
	seg := tensor.New(z.params[0].Value.DType(), z.hi-z.lo)
	z.copyRange(seg, func(p Param) *tensor.Tensor { return p.Value }, false)
	all, err := z.gc.Allgather(ctx, seg, z.name+".params")
	if err != nil {
		return err
	}
	for i, p := range z.params {
		copy(p.Value.Bytes(), elems(all, z.offs[i], z.offs[i]+p.Value.Len()).Bytes())
	}
	return nil
}

// State returns a copy of this rank's shard of the state (see Zero).
func (z *Zero) State() *State { return z.inner.State() }

// ConsolidateState gathers the full state on root (nil elsewhere): every
// slot of every parameter in the parameter's shape, as the unsharded
// optimizer's State has it, with the wrapped optimizer's kind and
// scalars. Every rank must call it. It gathers one slot at a time with an
// allgather (the Collectives has no gather), so every rank holds one
// slot's full vector while it runs; only root keeps them.
func (z *Zero) ConsolidateState(ctx context.Context, root int) (*State, error) {
	st := z.inner.State()
	slots := zeroSlots(st)
	var full *State
	if z.rank == root {
		full = &State{Kind: st.Kind, Scalars: maps.Clone(st.Scalars), Tensors: map[string]*tensor.Tensor{}}
	}
	for _, slot := range slots {
		seg := tensor.New(z.params[0].Value.DType(), z.hi-z.lo)
		off := 0
		for _, pc := range z.pieces {
			t := st.Tensors[SlotKey(z.params[pc.param].Name, slot)]
			if t == nil || t.Len() != pc.b-pc.a || t.DType() != seg.DType() {
				return nil, fmt.Errorf("optim: Zero: slot %q of %q is %v: not an elementwise state of the piece", slot, z.params[pc.param].Name, t)
			}
			copy(elems(seg, off, off+pc.b-pc.a).Bytes(), t.Bytes())
			off += pc.b - pc.a
		}
		all, err := z.gc.Allgather(ctx, seg, z.name+".state."+slot)
		if err != nil {
			return nil, err
		}
		if full == nil {
			continue
		}
		for i, p := range z.params {
			t := tensor.New(all.DType(), z.shapes[i]...)
			copy(t.Bytes(), elems(all, z.offs[i], z.offs[i]+p.Value.Len()).Bytes())
			full.Tensors[SlotKey(p.Name, slot)] = t
		}
	}
	return full, nil
}

// zeroSlots returns the slot names of s's tensors, sorted.
func zeroSlots(s *State) []string {
	var slots []string
	for k := range s.Tensors {
		if i := strings.LastIndexByte(k, '/'); i >= 0 && !slices.Contains(slots, k[i+1:]) {
			slots = append(slots, k[i+1:])
		}
	}
	slices.Sort(slots)
	return slots
}

// SetState replaces the state: s is either this rank's shard (as State
// returns it) or a full state (as ConsolidateState or the unsharded
// optimizer's State returns it: every parameter's slots in the
// parameter's shape), of which this rank takes its range. A tensor that
// fits neither (a state made for a parameter of another shape) fails
// with ErrShapeChanged, on every rank alike, before anything changes.
func (z *Zero) SetState(s *State) error {
	if s == nil {
		return fmt.Errorf("%w: nil state", ErrState)
	}
	full, err := z.isFull(s)
	if err != nil || !full {
		if err == nil {
			err = z.inner.SetState(s)
		}
		return err
	}
	shard := &State{Kind: s.Kind, Scalars: maps.Clone(s.Scalars), Tensors: map[string]*tensor.Tensor{}}
	for k, t := range s.Tensors {
		p := z.paramOf(k)
		for _, pc := range z.pieces {
			if pc.param == p {
				shard.Tensors[k] = elems(t, pc.a, pc.b).Clone()
			}
		}
	}
	return z.inner.SetState(shard)
}

// paramOf returns the index of the parameter of state key k, or -1.
func (z *Zero) paramOf(k string) int {
	i := strings.LastIndexByte(k, '/')
	if i < 0 {
		return -1
	}
	return slices.IndexFunc(z.params, func(p Param) bool { return p.Name == k[:i] })
}

// isFull reports whether s is a full state (every tensor in its
// parameter's shape and dtype, on the host) rather than this rank's shard
// (every tensor 1-D, of its piece's length; where both fit, the two read
// the same); a tensor that fits neither is an error.
func (z *Zero) isFull(s *State) (bool, error) {
	full := true
	for k, t := range s.Tensors {
		p := z.paramOf(k)
		if p < 0 {
			return false, fmt.Errorf("%w: tensor %q is not a parameter's slot", ErrState, k)
		}
		if t.Device().Kind != tensor.CPU || t.DType() != z.params[p].Value.DType() {
			return false, fmt.Errorf("%w: tensor %q is %v, want %v on the host", ErrState, k, t, z.params[p].Value.DType())
		}
		isFull := t.Shape().Equal(z.shapes[p])
		piece := -1
		for _, pc := range z.pieces {
			if pc.param == p {
				piece = pc.b - pc.a
			}
		}
		isShard := len(t.Shape()) == 1 && t.Len() == piece
		if !isFull && !isShard {
			return false, fmt.Errorf("%w: %q is %v in the state, the parameter %v (this rank's piece: %d elements)", ErrShapeChanged, k, t.Shape(), z.shapes[p], max(piece, 0))
		}
		full = full && isFull
	}
	return full, nil
}
