package optim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gohorovod/gohorovod/tensor"
)

// ReduceGroup is a fixed set of tensors that a Collectives reduces in place
// together, step after step, under names that it holds from the group's
// creation to its Close (the runtime's AllreduceGroup).
type ReduceGroup interface {
	// Start starts one reduction of every tensor of the group. The
	// previous one must have completed.
	Start() (Waiter, error)
	// Close releases the group's names. It fails while a reduction is
	// in flight; closing twice is harmless.
	Close() error
}

// ReduceGroupCollectives is a Collectives that can also hold a ReduceGroup:
// a set of tensors prepared once for repeated in-place allreduce, tensor i
// under names[i] (the same names on every rank), with AllreduceAsync's
// scaling. The DistributedOptimizer reduces its gradients in such groups
// when the Collectives provides them (FromRuntime's does).
type ReduceGroupCollectives interface {
	Collectives
	NewReduceGroup(ts []*tensor.Tensor, names []string, op tensor.ReduceOp, prescale, postscale float64) (ReduceGroup, error)
}

// DefaultBucketBytes is the default of BucketBytes.
const DefaultBucketBytes = 64 << 10

// Errors of the DistributedOptimizer's gradient storage and life cycle.
var (
	// ErrStaleGradient: after NewDistributed moved the gradients into
	// its flat buffer (FlatGradients(true)), something wrote into a
	// gradient's former storage, typically a model that keeps the slices
	// it took from its gradient tensors before. Such a model would train
	// nothing: reach the gradients through Param.Grad (the same
	// *tensor.Tensor, now a view of the buffer), or leave FlatGradients
	// off.
	ErrStaleGradient = errors.New("optim: a gradient was written to the storage it had before NewDistributed moved it into the flat gradient buffer (FlatGradients(true)); " +
		"write gradients through Param.Grad, not through slices taken before, or leave FlatGradients off")
	// ErrClosed: the DistributedOptimizer was closed.
	ErrClosed = errors.New("optim: the DistributedOptimizer is closed")
)

// FlatGradients sets whether the DistributedOptimizer, on a Collectives
// that holds reduce groups (ReduceGroupCollectives, such as FromRuntime's),
// moves the gradients into one flat buffer per dtype, laid out in backward
// order, so that the runtime reduces neighbouring gradients where they lie
// instead of copying them through its fusion buffer (PyTorch DDP's
// gradient_as_bucket_view, which is opt-in there too). Default false.
//
// By default the gradients stay where the caller put them, so a model
// that writes into the slices it wrapped in its gradient tensors trains
// as it reads. Gradients that already lie back to back in one allocation
// (made with tensor.NewFlat, in forward or backward order) are handed to
// the runtime in memory order within each bucket, and it reduces them in
// place all the same; others go through the fusion buffer, a copy in and
// out of each small gradient per step.
//
// Moving keeps every gradient's *tensor.Tensor (Param.Grad): the tensor
// object is re-pointed at its part of the buffer, its values copied, and
// its former storage zeroed and left to the caller. Everything that
// reaches gradients through Param.Grad sees the move; a slice taken from
// a gradient tensor before NewDistributed does not, and a model that goes
// on writing into one would train nothing. The first step checks the
// former storage and fails with ErrStaleGradient if it was written. Turn
// the move on only for a model and Optimizer that reach the gradients
// through Param.Grad alone and rely on no storage they share. Gradients
// are not moved when two parameters share one gradient tensor, under
// compression (the half-precision copies that travel are flat instead), or
// on a Collectives without reduce groups.
func FlatGradients(on bool) DistOption { return func(c *distConfig) { c.flat = on } }

// BucketBytes sets the size of the buckets in which the DistributedOptimizer
// reduces gradients on a Collectives that holds reduce groups: consecutive
// gradients in backward order, up to n bytes each (a larger gradient gets
// a bucket of its own; 0 puts every gradient in its own), each bucket one
// ReduceGroup started as soon as its last member is Ready. Larger buckets
// start fewer, larger reductions; smaller ones start earlier and overlap
// more with backward. Groups and NumGroups, when given, are the buckets
// instead. Default DefaultBucketBytes.
func BucketBytes(n int) DistOption { return func(c *distConfig) { c.bucket = n } }

// BackwardOrder gives the order in which backward reports the gradients
// (every parameter's name once), which sets the layout of the flat
// gradient buffer and the buckets (see FlatGradients, BucketBytes). Default:
// the reverse of the wrapped optimizer's parameter order, the order of a
// model whose parameters are listed in forward order. A wrong order costs
// speed, not correctness.
func BackwardOrder(names ...string) DistOption {
	return func(c *distConfig) { c.order = slices.Clone(names) }
}

// backwardOrder returns the parameter indices in backward order.
func (d *DistributedOptimizer) backwardOrder(params []Param) ([]int, error) {
	ord := make([]int, 0, len(params))
	if d.cfg.order == nil {
		for i := len(params) - 1; i >= 0; i-- {
			ord = append(ord, i)
		}
		return ord, nil
	}
	seen := make([]bool, len(params))
	for _, name := range d.cfg.order {
		i, ok := d.index[name]
		if !ok || seen[i] {
			return nil, fmt.Errorf("optim: DistributedOptimizer: backward order names %q, which is not a parameter or is named twice", name)
		}
		seen[i] = true
		ord = append(ord, i)
	}
	if len(ord) != len(params) {
		return nil, fmt.Errorf("optim: DistributedOptimizer: backward order names %d of the %d parameters", len(ord), len(params))
	}
	return ord, nil
}

// layout allocates what travels for the held groups: flat half-precision
// buffers under compression, else (with FlatGradients) the gradients moved
// into flat buffers. Both are laid out in backward order, one buffer per
// dtype.
func (d *DistributedOptimizer) layout(params []Param, ord []int) {
	move := d.cfg.flat && d.cfg.comp == NoCompression
	seen := make(map[*tensor.Tensor]bool, len(params))
	for _, p := range params {
		if seen[p.Grad] {
			move = false // two parameters share a gradient tensor
		}
		seen[p.Grad] = true
	}
	if !move && d.cfg.comp == NoCompression {
		return
	}
	var dtypes []tensor.DType
	byType := make(map[tensor.DType][]int)
	for _, i := range ord {
		dt := d.cfg.comp.dtype(params[i].Grad.DType())
		if _, ok := byType[dt]; !ok {
			dtypes = append(dtypes, dt)
		}
		byType[dt] = append(byType[dt], i)
	}
	if move {
		d.stale = make([][]byte, len(params))
	}
	for _, dt := range dtypes {
		idx := byType[dt]
		shapes := make([]tensor.Shape, len(idx))
		for k, i := range idx {
			shapes[k] = params[i].Grad.Shape()
		}
		parts := alignedFlat(dt, shapes)
		for k, i := range idx {
			if !move {
				d.wire[i] = parts[k]
				continue
			}
			g := params[i].Grad
			old := g.Bytes()
			copy(parts[k].Bytes(), old)
			clear(old)
			d.stale[i] = old
			*g = *parts[k] // every holder of the tensor now sees the buffer
			d.wire[i] = g
		}
	}
}

// alignLarge is the size from which a gradient starts on a cache line of
// the flat buffer, and cacheLine that alignment. Kernels that write a
// gradient (the backward GEMM's AXPY rows) slow down when every row's
// stores straddle cache lines (on a Xeon, gonum's Sgemm writing an MNIST
// weight gradient off a cache line was markedly slower, and so was MNIST
// training: docs/BENCHMARKS.md). Smaller gradients stay back to back.
const (
	alignLarge = 64 << 10
	cacheLine  = 64
)

// alignedFlat is tensor.NewFlat with each part of alignLarge bytes or more
// starting on a cache line. The padding goes first where it can: before
// the first gradient, so that the first large one is aligned, and then
// only before a large gradient that would still be off a line. Gradients
// with no padding between them stay one run of memory, which the runtime's
// static schedule reduces in one call.
func alignedFlat(dt tensor.DType, shapes []tensor.Shape) []*tensor.Tensor {
	aligns := cacheLine%dt.Size() == 0
	lead := 0
	if aligns {
		before := 0
		for _, s := range shapes {
			n := s.NumElements() * dt.Size()
			if n >= alignLarge {
				lead = (cacheLine - before%cacheLine) % cacheLine
				break
			}
			before += n
		}
	}
	var all []tensor.Shape
	var index []int // index in all of each part
	off := 0
	if lead > 0 {
		all = append(all, tensor.Shape{lead / dt.Size()})
		off = lead
	}
	for _, s := range shapes {
		n := s.NumElements() * dt.Size()
		if n >= alignLarge && off%cacheLine != 0 && aligns {
			pad := cacheLine - off%cacheLine
			all = append(all, tensor.Shape{pad / dt.Size()})
			off += pad
		}
		index = append(index, len(all))
		all = append(all, s)
		off += n
	}
	// The buffer itself: Go allocates blocks of more than 32 KiB on page
	// boundaries, and smaller ones on their size class, which for the
	// sizes of gradients under alignLarge does not matter.
	_, parts := tensor.NewFlat(dt, all...)
	out := make([]*tensor.Tensor, len(shapes))
	for k, i := range index {
		out[k] = parts[i]
	}
	return out
}

// buckets splits the backward order into runs of at most d.cfg.bucket
// bytes (of what travels).
func (d *DistributedOptimizer) buckets(ord []int) [][]int {
	var units [][]int
	var cur []int
	size := 0
	for _, i := range ord {
		n := d.wire[i].NumBytes()
		if len(cur) > 0 && size+n > d.cfg.bucket {
			units = append(units, cur)
			cur, size = nil, 0
		}
		cur = append(cur, i)
		size += n
	}
	return append(units, cur)
}

// hold creates a ReduceGroup per unit, its members in backward order (the
// order of the flat buffers) except that members lying back to back in
// one allocation follow one another in memory order (see inMemoryOrder),
// and closes those made if one fails.
func (d *DistributedOptimizer) hold(gc ReduceGroupCollectives, params []Param, ord []int) error {
	pos := make([]int, len(params))
	for k, i := range ord {
		pos[i] = k
	}
	pre, post := d.scales()
	d.groups = make([]ReduceGroup, len(d.units))
	for u, members := range d.units {
		slices.SortFunc(members, func(a, b int) int { return pos[a] - pos[b] })
		inMemoryOrder(members, d.wire)
		ts := make([]*tensor.Tensor, len(members))
		names := make([]string, len(members))
		for k, i := range members {
			ts[k], names[k] = d.wire[i], params[i].Name
		}
		g, err := gc.NewReduceGroup(ts, names, d.cfg.op, pre, post)
		if err != nil {
			for _, made := range d.groups[:u] {
				made.Close()
			}
			d.groups = nil
			return fmt.Errorf("optim: DistributedOptimizer: reduce group of %q: %w", names, err)
		}
		d.groups[u] = g
	}
	return nil
}

// inMemoryOrder reorders members (indices into wire, in backward order) so
// that a member whose storage starts where another member's ends comes
// right after it: each run of members back to back in one allocation
// (tensor.Follows) in memory order, the runs in the order of their first
// member. The runtime reduces such runs of a fused response where they
// lie, so gradients allocated with tensor.NewFlat in forward order (the
// reverse of backward order) are reduced in place without being moved.
// Ranks whose layouts differ order differently, which stays correct (the
// runtime negotiates the members by name) but fuses in one order for all,
// so that some ranks copy.
func inMemoryOrder(members []int, wire []*tensor.Tensor) {
	if len(members) < 2 {
		return
	}
	start := make(map[*byte]int, len(members)) // first byte -> position in members
	for k, i := range members {
		if b := wire[i].Bytes(); len(b) > 0 {
			start[&b[0]] = k
		}
	}
	next := make([]int, len(members)) // position of the member that follows, or -1
	after := make([]bool, len(members))
	for k, i := range members {
		next[k] = -1
		b := wire[i].Bytes()
		if len(b) == 0 || len(b) == cap(b) {
			continue
		}
		if j, ok := start[&b[:len(b)+1][len(b)]]; ok && !after[j] && tensor.Follows(wire[members[j]], wire[i]) {
			next[k], after[j] = j, true
		}
	}
	out := make([]int, 0, len(members))
	for k := range members {
		if after[k] {
			continue // placed after the member it follows
		}
		for j := k; j >= 0; j = next[j] {
			out = append(out, members[j])
		}
	}
	copy(members, out)
}

// checkMoved checks, once, that nothing wrote into the former storage of
// parameter i's gradient since it was moved; d.mu is held.
func (d *DistributedOptimizer) checkMoved(i int) error {
	if d.stale == nil || d.stale[i] == nil {
		return nil
	}
	old := d.stale[i]
	d.stale[i] = nil
	var zeros [4096]byte
	for len(old) > 0 {
		n := min(len(old), len(zeros))
		if !bytes.Equal(old[:n], zeros[:n]) {
			return fmt.Errorf("%w (parameter %q)", ErrStaleGradient, d.inner.Params()[i].Name)
		}
		old = old[n:]
	}
	return nil
}

// Close releases what the optimizer holds on the Collectives: the names of
// its reduce groups. Call it when training ends (before the runtime shuts
// down, or after: then there is nothing left to release). Afterwards Ready,
// Synchronize and Step fail with ErrClosed; the gradients stay where they
// are (in the flat buffer if they were moved). Close fails with
// ErrInFlight while a step has reductions started (after Ready, or after a
// cancelled Synchronize or Step): finish the step with Step or Synchronize,
// or shut the runtime down (which fails them), then Close again. Closing
// twice is harmless.
func (d *DistributedOptimizer) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	if err := d.startedErr("Close"); err != nil {
		return err
	}
	var errs []error
	for u, g := range d.groups {
		if g == nil {
			continue
		}
		if err := g.Close(); err != nil {
			errs = append(errs, fmt.Errorf("optim: closing the reduce group of %q: %w", d.unitName(u), err))
			continue
		}
		d.groups[u] = nil
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	d.closed = true
	return nil
}

// Rebind moves the optimizer onto coll: the Collectives of a runtime that
// was initialised again since the optimizer was made, with perhaps a new
// size (optim/elastic's Run calls it after re-forming an elastic job).
// The step under way, if any, is abandoned: its reductions belong to the
// old runtime, which must have been shut down, so that they have completed
// or failed; its gradients are left as they are. The old reduce groups are
// closed and new ones held on coll, over the same gradient layout. A
// closed optimizer is opened again. coll must hold reduce groups if the
// old Collectives did.
func (d *DistributedOptimizer) Rebind(coll Collectives) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, hs := range d.handles {
		for _, h := range hs {
			_ = h.Wait(context.Background()) // completed or failed: the old runtime is down
		}
	}
	d.endStep()
	for u, g := range d.groups {
		if g != nil {
			_ = g.Close() // a group of the old runtime: closing only releases it
			d.groups[u] = nil
		}
	}
	if d.groups != nil {
		gc, ok := coll.(ReduceGroupCollectives)
		if !ok {
			return fmt.Errorf("optim: Rebind: the optimizer reduces its gradients in held groups, which %T does not provide", coll)
		}
		d.groups = nil
		if err := d.hold(gc, d.inner.Params(), d.ord); err != nil {
			return err
		}
	}
	d.coll = coll
	d.closed = false
	return nil
}
