package runtime

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// CallOption adjusts one collective call.
type CallOption func(*callOptions)

type callOptions struct {
	prescale, postscale float64
	set                 *ProcessSet // InProcessSet; nil: the global set
}

// Prescale multiplies the input by f before the reduction.
func Prescale(f float64) CallOption { return func(o *callOptions) { o.prescale = f } }

// Postscale multiplies the result by f after the reduction.
func Postscale(f float64) CallOption { return func(o *callOptions) { o.postscale = f } }

func callOpts(opts []CallOption) callOptions {
	o := callOptions{prescale: 1, postscale: 1}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// opName prefixes a user's tensor name with the operation, as Horovod's
// bindings do ("allreduce.<name>"), or makes an automatic name; ranks must
// issue unnamed operations in the same order.
func (r *Runtime) opName(prefix, name string) string {
	if name != "" {
		return prefix + "." + name
	}
	r.mu.Lock()
	r.counter++
	n := r.counter
	r.mu.Unlock()
	return prefix + ".noname." + strconv.FormatUint(n, 10)
}

func shapeOf(t *tensor.Tensor) []int64 {
	s := t.Shape()
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

func deviceOf(t *tensor.Tensor) int32 {
	d := t.Device()
	if d.Kind == tensor.CPU {
		return wire.CPU
	}
	return int32(d.Index)
}

// resolve returns the process set of a call (InProcessSet; the global set
// by default) and its options, refusing scale factors on operations that do
// not reduce.
func (r *Runtime) resolve(op string, reduces bool, opts []CallOption) (*pset, callOptions, error) {
	o := callOpts(opts)
	if !reduces && (o.prescale != 1 || o.postscale != 1) {
		return nil, o, invalid("%s takes no Prescale or Postscale: they apply to reductions only", op)
	}
	if err := r.checkRunning(); err != nil {
		return nil, o, err
	}
	p, err := r.setFor(op, o.set)
	return p, o, err
}

func (r *Runtime) newEntry(p *pset, typ wire.RequestType, name string, in, out *tensor.Tensor, h *Handle, idx int) *entry {
	return &entry{
		req: wire.Request{Rank: int32(p.rank), Type: typ, DType: in.DType(), Name: name, Device: deviceOf(in),
			Shape: shapeOf(in), Prescale: 1, Postscale: 1},
		in: in, out: out, h: h, idx: idx, enqueued: time.Now(), bit: -1,
	}
}

func (r *Runtime) checkReduce(p *pset, op ReduceOp, dt tensor.DType) error {
	if !wire.PublicOp(op) {
		return invalid("unknown reduction %v", op)
	}
	if op == Adasum {
		if p.id != 0 {
			return invalid("%s (process set %d)", AdasumProcessSetText, p.id)
		}
		if p.size&(p.size-1) != 0 || bits.OnesCount(uint(p.size)) != 1 {
			return fmt.Errorf("%w: %s", ErrInvalidArgument, adasumPow2Text)
		}
		if !dt.IsFloat() {
			return invalid("Adasum supports float16, bfloat16, float32 and float64 tensors, not %v", dt)
		}
	}
	if op == Average && dt == tensor.Bool {
		return invalid("Average is not defined on bool tensors: Sum and Max are a logical or, Min and Product a logical and")
	}
	return nil
}

func (r *Runtime) enqueue(p *pset, es ...*entry) error {
	if err := r.checkRunning(); err != nil {
		return err
	}
	if err := p.q.add(es...); err != nil {
		return err
	}
	r.stats.requests.Add(int64(len(es)))
	if p.q.eager.Load() {
		p.q.signal()
	}
	return nil
}

func (r *Runtime) allreduceAsync(ts []*tensor.Tensor, name string, op ReduceOp, inPlace bool, opts []CallOption) (*Handle, error) {
	p, o, err := r.resolve("Allreduce", true, opts)
	if err != nil {
		return nil, err
	}
	h := newHandle(len(ts))
	es := make([]*entry, len(ts))
	base := r.opName("allreduce", name)
	for i, t := range ts {
		if err := r.checkTensor(t); err != nil {
			return nil, err
		}
		if err := r.checkReduce(p, op, t.DType()); err != nil {
			return nil, err
		}
		out := t
		if !inPlace {
			out = newOutput(t, t.Shape())
		}
		n := base
		if len(ts) > 1 {
			n = fmt.Sprintf("%s_%dof%d", base, i+1, len(ts))
		}
		typ := wire.Allreduce
		if op == Adasum {
			typ = wire.Adasum
		}
		e := r.newEntry(p, typ, n, t, out, h, i)
		e.req.Op, e.req.Prescale, e.req.Postscale = op, o.prescale, o.postscale
		es[i] = e
	}
	if err := r.enqueue(p, es...); err != nil {
		return nil, err
	}
	if len(es) > 1 {
		p.q.signal()
	}
	return h, nil
}

// AllreduceAsync enqueues an allreduce of t under name and returns its
// handle; the result is a new tensor (Handle.Output). An empty name gets an
// automatic one (ranks must then call in the same order).
func (r *Runtime) AllreduceAsync(t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	return r.allreduceAsync([]*tensor.Tensor{t}, name, op, false, opts)
}

// AllreduceAsyncInPlace is AllreduceAsync that leaves the result in t.
func (r *Runtime) AllreduceAsyncInPlace(t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	return r.allreduceAsync([]*tensor.Tensor{t}, name, op, true, opts)
}

// Allreduce combines t across ranks with op and returns the result in a new
// tensor.
func (r *Runtime) Allreduce(ctx context.Context, t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*tensor.Tensor, error) {
	h, err := r.AllreduceAsync(t, name, op, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	return h.Output(), nil
}

// AllreduceInPlace combines t across ranks with op, in place.
func (r *Runtime) AllreduceInPlace(ctx context.Context, t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) error {
	h, err := r.AllreduceAsyncInPlace(t, name, op, opts...)
	if err != nil {
		return err
	}
	return h.Wait(ctx)
}

// GroupedAllreduceAsync enqueues the allreduce of several tensors under one
// handle; they are negotiated separately (named "<name>_<i>of<n>") and fused
// where they fit. Results are new tensors (Handle.Outputs).
func (r *Runtime) GroupedAllreduceAsync(ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	if len(ts) == 0 {
		return nil, invalid("grouped allreduce of no tensors")
	}
	return r.allreduceAsync(ts, name, op, false, opts)
}

// GroupedAllreduceAsyncInPlace is GroupedAllreduceAsync leaving the results
// in the input tensors.
func (r *Runtime) GroupedAllreduceAsyncInPlace(ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	if len(ts) == 0 {
		return nil, invalid("grouped allreduce of no tensors")
	}
	return r.allreduceAsync(ts, name, op, true, opts)
}

// GroupedAllreduce reduces several tensors and returns new result tensors.
func (r *Runtime) GroupedAllreduce(ctx context.Context, ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) ([]*tensor.Tensor, error) {
	h, err := r.GroupedAllreduceAsync(ts, name, op, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	return h.Outputs(), nil
}

// AllgatherAsync enqueues an allgather: the result concatenates every
// rank's t along the first dimension, in rank order. The first dimension may
// differ across ranks; the others must agree.
func (r *Runtime) AllgatherAsync(t *tensor.Tensor, name string, opts ...CallOption) (*Handle, error) {
	p, _, err := r.resolve("Allgather", false, opts)
	if err != nil {
		return nil, err
	}
	if err := r.checkTensor(t); err != nil {
		return nil, err
	}
	h := newHandle(1)
	if err := r.enqueue(p, r.newEntry(p, wire.Allgather, r.opName("allgather", name), t, nil, h, 0)); err != nil {
		return nil, err
	}
	return h, nil
}

// Allgather is the blocking form of AllgatherAsync.
func (r *Runtime) Allgather(ctx context.Context, t *tensor.Tensor, name string, opts ...CallOption) (*tensor.Tensor, error) {
	h, err := r.AllgatherAsync(t, name, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	return h.Output(), nil
}

func (r *Runtime) broadcastAsync(t *tensor.Tensor, root int, name string, inPlace bool, opts []CallOption) (*Handle, error) {
	p, _, err := r.resolve("Broadcast", false, opts)
	if err != nil {
		return nil, err
	}
	if err := r.checkTensor(t); err != nil {
		return nil, err
	}
	setRoot, err := p.rootInSet(root)
	if err != nil {
		return nil, err
	}
	out := t
	if !inPlace {
		out = newOutput(t, t.Shape())
	}
	h := newHandle(1)
	e := r.newEntry(p, wire.Broadcast, r.opName("broadcast", name), t, out, h, 0)
	e.req.Root = int32(setRoot)
	if err := r.enqueue(p, e); err != nil {
		return nil, err
	}
	return h, nil
}

// BroadcastAsync enqueues a broadcast of root's t; the result is a new
// tensor on every rank (t is not modified).
func (r *Runtime) BroadcastAsync(t *tensor.Tensor, root int, name string, opts ...CallOption) (*Handle, error) {
	return r.broadcastAsync(t, root, name, false, opts)
}

// BroadcastAsyncInPlace enqueues a broadcast that overwrites t with root's.
func (r *Runtime) BroadcastAsyncInPlace(t *tensor.Tensor, root int, name string, opts ...CallOption) (*Handle, error) {
	return r.broadcastAsync(t, root, name, true, opts)
}

// Broadcast returns root's t on every rank, in a new tensor.
func (r *Runtime) Broadcast(ctx context.Context, t *tensor.Tensor, root int, name string, opts ...CallOption) (*tensor.Tensor, error) {
	h, err := r.BroadcastAsync(t, root, name, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	return h.Output(), nil
}

// BroadcastInPlace overwrites t with root's t.
func (r *Runtime) BroadcastInPlace(ctx context.Context, t *tensor.Tensor, root int, name string, opts ...CallOption) error {
	h, err := r.BroadcastAsyncInPlace(t, root, name, opts...)
	if err != nil {
		return err
	}
	return h.Wait(ctx)
}

// AlltoallAsync enqueues an alltoall: rows splits[i] of t (in order along
// the first dimension) go to rank i; with nil splits the first dimension is
// divided equally. The result concatenates the rows received from each
// rank, in rank order; Handle.ReceivedSplits says how many came from each.
func (r *Runtime) AlltoallAsync(t *tensor.Tensor, splits []int, name string, opts ...CallOption) (*Handle, error) {
	p, _, err := r.resolve("Alltoall", false, opts)
	if err != nil {
		return nil, err
	}
	if err := r.checkTensor(t); err != nil {
		return nil, err
	}
	if len(t.Shape()) == 0 {
		return nil, invalid("alltoall of a rank-zero tensor")
	}
	rows := t.Shape()[0]
	if splits == nil {
		if rows%p.size != 0 {
			return nil, invalid("splits not provided, but first dimension of tensor is not an even multiple of the number of workers.")
		}
		splits = make([]int, p.size)
		for i := range splits {
			splits[i] = rows / p.size
		}
	} else {
		if len(splits) != p.size {
			return nil, invalid("Number of entries in splits does not equal number of workers.")
		}
		sum := 0
		for _, s := range splits {
			if s < 0 {
				return nil, invalid("negative entry in splits")
			}
			sum += s
		}
		if sum > rows {
			return nil, invalid("Sum of splits entries is greater than the first dimension of tensor.")
		}
		splits = append([]int(nil), splits...)
	}
	h := newHandle(1)
	e := r.newEntry(p, wire.Alltoall, r.opName("alltoall", name), t, nil, h, 0)
	e.splits = splits
	if err := r.enqueue(p, e); err != nil {
		return nil, err
	}
	return h, nil
}

// Alltoall is the blocking form of AlltoallAsync; it returns the received
// tensor and the received splits.
func (r *Runtime) Alltoall(ctx context.Context, t *tensor.Tensor, splits []int, name string, opts ...CallOption) (*tensor.Tensor, []int, error) {
	h, err := r.AlltoallAsync(t, splits, name, opts...)
	if err != nil {
		return nil, nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, nil, err
	}
	return h.Output(), h.ReceivedSplits(), nil
}

// ReducescatterRows returns how many rows of a first dimension of dim0 rank
// receives from a reducescatter over size ranks: the first dim0%size ranks
// get one extra row.
func ReducescatterRows(dim0, size, rank int) int {
	n := dim0 / size
	if rank < dim0%size {
		n++
	}
	return n
}

// ReducescatterAsync enqueues a reducescatter: t is reduced across ranks
// (Sum or Average) and each rank receives its share of the first dimension
// (see ReducescatterRows) in a new tensor.
func (r *Runtime) ReducescatterAsync(t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	p, o, err := r.resolve("Reducescatter", true, opts)
	if err != nil {
		return nil, err
	}
	h := newHandle(1)
	e, err := r.reducescatterEntry(p, t, r.opName("reducescatter", name), op, o, h, 0)
	if err != nil {
		return nil, err
	}
	if err := r.enqueue(p, e); err != nil {
		return nil, err
	}
	return h, nil
}

// reducescatterEntry checks a reducescatter of t and makes its entry, result
// idx of h.
func (r *Runtime) reducescatterEntry(p *pset, t *tensor.Tensor, name string, op ReduceOp, o callOptions, h *Handle, idx int) (*entry, error) {
	if err := r.checkTensor(t); err != nil {
		return nil, err
	}
	if op != Sum && op != Average {
		return nil, fmt.Errorf("%w: %s", ErrInvalidArgument, reducescatterText)
	}
	if err := r.checkReduce(p, op, t.DType()); err != nil {
		return nil, err
	}
	if op == Average {
		o.postscale /= float64(p.size)
	}
	var out *tensor.Tensor
	if s := t.Shape(); len(s) > 0 {
		shape := append([]int(nil), s...)
		shape[0] = ReducescatterRows(s[0], p.size, p.rank)
		out = newOutput(t, shape)
	}
	e := r.newEntry(p, wire.Reducescatter, name, t, out, h, idx)
	e.req.Op, e.req.Prescale, e.req.Postscale = op, o.prescale, o.postscale
	return e, nil
}

// Reducescatter is the blocking form of ReducescatterAsync.
func (r *Runtime) Reducescatter(ctx context.Context, t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*tensor.Tensor, error) {
	h, err := r.ReducescatterAsync(t, name, op, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	return h.Output(), nil
}

func (r *Runtime) control(op string, typ wire.RequestType, name string, opts []CallOption) (*Handle, error) {
	p, _, err := r.resolve(op, false, opts)
	if err != nil {
		return nil, err
	}
	h := newHandle(1)
	e := &entry{req: wire.Request{Rank: int32(p.rank), Type: typ, Name: name, Device: wire.CPU, Prescale: 1, Postscale: 1},
		h: h, enqueued: time.Now()}
	if err := r.enqueue(p, e); err != nil {
		return nil, err
	}
	return h, nil
}

// Barrier returns once every rank (of the process set, with InProcessSet)
// has called it.
func (r *Runtime) Barrier(ctx context.Context, opts ...CallOption) error {
	h, err := r.control("Barrier", wire.Barrier, negotiate.BarrierName, opts)
	if err != nil {
		return err
	}
	return h.Wait(ctx)
}

// JoinAsync is the asynchronous form of Join; Handle.LastJoinedRank gives
// the result.
func (r *Runtime) JoinAsync(opts ...CallOption) (*Handle, error) {
	return r.control("Join", wire.Join, negotiate.JoinName, opts)
}

// Join tells the other ranks that this rank has run out of data: until every
// rank has joined, their allreduces complete with zeros from this rank, and
// allgather, broadcast, alltoall and reducescatter fail. It returns, on
// every rank, the rank that joined last. With InProcessSet, the join state
// is the set's own, and the rank returned is still a global rank.
func (r *Runtime) Join(ctx context.Context, opts ...CallOption) (int, error) {
	h, err := r.JoinAsync(opts...)
	if err != nil {
		return -1, err
	}
	if err := h.Wait(ctx); err != nil {
		return -1, err
	}
	return h.LastJoinedRank(), nil
}
