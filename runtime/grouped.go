package runtime

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// Grouped allgather and reducescatter (Horovod's grouped_allgather and
// grouped_reducescatter). A group runs in two steps:
//
//  1. The ranks allgather the group's size under the name
//     "group.<op>.<name>" (one int64 per rank; the response cache makes it
//     cheap in steady state). Ranks that disagree about the size all fail
//     the group's handle with the same OpError instead of waiting forever
//     for members that some ranks never submit.
//  2. The members are enqueued at once, under one lock, as
//     "<op>.<name>_<i>of<n>" (1-based, as Horovod names them; a group of
//     one keeps "<op>.<name>"), and the loop is woken: each rank submits the
//     whole group in one cycle, so the members become ready together, in
//     the cycle in which the last rank submits them.
//
// Each member is negotiated like a lone allgather or reducescatter (dtype,
// shape and scale checks per member; members may differ in dtype and
// shape) and performed as its own collective: the fusion planner fuses
// allreduces only. The results are the handle's Outputs, in order.

// groupName returns the name of member i of a group of n under base.
func groupName(base string, i, n int) string {
	if n == 1 {
		return base
	}
	return fmt.Sprintf("%s_%dof%d", base, i+1, n)
}

// checkGroup checks what one rank can about a group of tensors: it is not
// empty, and its tensors are on one device.
func (r *Runtime) checkGroup(what string, ts []*tensor.Tensor) error {
	if len(ts) == 0 {
		return invalid("grouped %s of no tensors", what)
	}
	for _, t := range ts {
		if err := r.checkTensor(t); err != nil {
			return err
		}
		if t.Device() != ts[0].Device() {
			return invalid("Tensors in list must be on same device.")
		}
	}
	return nil
}

// generation returns the queue's generation (it changes at each Init).
func (q *queue) generation() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.gen
}

// enqueueGroup runs the two steps above for the member entries es (made
// for handle h) of the group base, and returns h.
func (r *Runtime) enqueueGroup(p *pset, op, base string, es []*entry, h *Handle) (*Handle, error) {
	q := p.q
	gen := q.generation()
	size := tensor.FromInt64([]int64{int64(len(es))})
	hs := newHandle(1)
	if err := r.enqueue(p, r.newEntry(p, wire.Allgather, "group."+base, size, nil, hs, 0)); err != nil {
		return nil, err
	}
	// Set now, before h is shared: Wait reads it, and the enqueue of the
	// members below (which sets it for other handles) then leaves it alone.
	h.q = q
	// The goroutine ends when hs completes, which every handle does: with
	// the ranks' sizes, or with an error (at the latest when the runtime
	// shuts down).
	go func() {
		<-hs.Done()
		if err := hs.Err(); err != nil {
			h.fail(err)
			return
		}
		if msg := groupMismatch(op, hs.Output().Int64s()); msg != "" {
			h.fail(&OpError{Name: base, Message: msg})
			return
		}
		now := time.Now()
		for _, e := range es {
			e.enqueued = now
		}
		if err := q.addOwned(gen, es); err != nil {
			if err == ErrGroupClosed { // Shutdown (and perhaps Init) came between the steps
				err = fmt.Errorf("%w (before the group's tensors were enqueued)", ErrShutdown)
			}
			h.fail(err)
			return
		}
		q.signal()
	}()
	return h, nil
}

// groupMismatch describes ranks that disagree about a group's size (sizes
// holds each rank's), or returns "".
func groupMismatch(op string, sizes []int64) string {
	for _, n := range sizes {
		if n != sizes[0] {
			var b strings.Builder
			fmt.Fprintf(&b, "Mismatched grouped %s sizes: the ranks sent groups of", op)
			for r, n := range sizes {
				if r > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, " %d (rank %d)", n, r)
			}
			b.WriteString(" tensors.")
			return b.String()
		}
	}
	return ""
}

// GroupedAllgatherAsync enqueues the allgather of several tensors under one
// handle: result i concatenates every rank's ts[i] along the first
// dimension, in rank order (Handle.Outputs). As with Allgather, the first
// dimension may differ across ranks and the others must agree; the tensors
// may differ from one another in dtype and shape, and must share a device.
//
// The ranks first agree on the group's size with a one-integer allgather
// named "group.allgather.<name>": if they passed different numbers of
// tensors, every rank's handle fails with the same OpError (no rank waits
// for members that others never submit). Then every rank submits the whole
// group in one cycle, tensor i named "allgather.<name>_<i+1>of<n>" as
// Horovod names them, so the members become ready together; each is then
// gathered by its own collective (the fusion planner fuses allreduces
// only).
func (r *Runtime) GroupedAllgatherAsync(ts []*tensor.Tensor, name string, opts ...CallOption) (*Handle, error) {
	p, _, err := r.resolve("Allgather", false, opts)
	if err != nil {
		return nil, err
	}
	if err := r.checkGroup("allgather", ts); err != nil {
		return nil, err
	}
	base := r.opName("allgather", name)
	h := newHandle(len(ts))
	es := make([]*entry, len(ts))
	for i, t := range ts {
		es[i] = r.newEntry(p, wire.Allgather, groupName(base, i, len(ts)), t, nil, h, i)
	}
	return r.enqueueGroup(p, "ALLGATHER", base, es, h)
}

// GroupedAllgather is the blocking form of GroupedAllgatherAsync.
func (r *Runtime) GroupedAllgather(ctx context.Context, ts []*tensor.Tensor, name string, opts ...CallOption) ([]*tensor.Tensor, error) {
	h, err := r.GroupedAllgatherAsync(ts, name, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	return h.Outputs(), nil
}

// GroupedReducescatterAsync enqueues the reducescatter of several tensors
// under one handle, with one op (Sum or Average) and the same call options
// for all: result i is this rank's share of the first dimension of the
// reduced ts[i] (see ReducescatterRows), in Handle.Outputs. The tensors may
// differ in dtype and shape, and must share a device. The ranks agree on
// the group's size first, and members are named and submitted as in
// GroupedAllgatherAsync ("reducescatter.<name>_<i+1>of<n>").
func (r *Runtime) GroupedReducescatterAsync(ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	p, o, err := r.resolve("Reducescatter", true, opts)
	if err != nil {
		return nil, err
	}
	if err := r.checkGroup("reducescatter", ts); err != nil {
		return nil, err
	}
	base := r.opName("reducescatter", name)
	h := newHandle(len(ts))
	es := make([]*entry, len(ts))
	for i, t := range ts {
		e, err := r.reducescatterEntry(p, t, groupName(base, i, len(ts)), op, o, h, i)
		if err != nil {
			return nil, err
		}
		es[i] = e
	}
	return r.enqueueGroup(p, "REDUCESCATTER", base, es, h)
}

// GroupedReducescatter is the blocking form of GroupedReducescatterAsync.
func (r *Runtime) GroupedReducescatter(ctx context.Context, ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) ([]*tensor.Tensor, error) {
	h, err := r.GroupedReducescatterAsync(ts, name, op, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	return h.Outputs(), nil
}
