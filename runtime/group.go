package runtime

import (
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// AllreduceGroup is a fixed set of tensors that are allreduced in place
// together, step after step — a model's gradients. Its requests are built
// once, so Start allocates the same small amount whatever the number of
// tensors; each tensor is still negotiated by name, cached and fused like
// any other allreduce. The group holds its names from NewAllreduceGroup to
// Close: no other operation may use them meanwhile (ErrDuplicateName), and
// in exchange a step looks none of them up by name in the tensor table.
type AllreduceGroup struct {
	r    *Runtime
	q    *queue // the process set's queue
	ents []*entry
	outs []*tensor.Tensor
	last *Handle
	gen  int // the runtime's generation (Init) the names are held in
}

// NewAllreduceGroup prepares the in-place allreduce of ts, tensor i under
// names[i] (the same names on every rank), with op and the call options
// (InProcessSet: within that set).
func (r *Runtime) NewAllreduceGroup(ts []*tensor.Tensor, names []string, op ReduceOp, opts ...CallOption) (*AllreduceGroup, error) {
	p, o, err := r.resolve("Allreduce", true, opts)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 || len(ts) != len(names) {
		return nil, invalid("allreduce group of %d tensors with %d names", len(ts), len(names))
	}
	g := &AllreduceGroup{r: r, q: p.q, ents: make([]*entry, len(ts)), outs: append([]*tensor.Tensor(nil), ts...)}
	seen := make(map[string]bool, len(ts))
	for i, t := range ts {
		if err := r.checkTensor(t); err != nil {
			return nil, err
		}
		if err := r.checkReduce(p, op, t.DType()); err != nil {
			return nil, err
		}
		name := r.opName("allreduce", names[i])
		if seen[name] {
			return nil, ErrDuplicateName
		}
		seen[name] = true
		typ := wire.Allreduce
		if op == Adasum {
			typ = wire.Adasum
		}
		e := r.newEntry(p, typ, name, t, t, nil, i)
		e.req.Op, e.req.Prescale, e.req.Postscale = op, o.prescale, o.postscale
		g.ents[i] = e
	}
	gen, err := p.q.own(g.ents)
	if err != nil {
		return nil, err
	}
	g.gen = gen
	return g, nil
}

// Close releases the group's names. It fails with ErrDuplicateName while a
// step is in flight; closing twice is harmless.
func (g *AllreduceGroup) Close() error {
	if g.gen == 0 {
		return nil
	}
	if err := g.q.disown(g.ents, g.gen); err != nil {
		return err
	}
	g.gen = 0
	return nil
}

// Len returns the number of tensors in the group.
func (g *AllreduceGroup) Len() int { return len(g.ents) }

// Start enqueues one step: the allreduce of every tensor of the group. The
// previous step must have completed (else ErrDuplicateName).
func (g *AllreduceGroup) Start() (*Handle, error) {
	if err := g.r.checkRunning(); err != nil {
		return nil, err
	}
	if g.gen == 0 {
		return nil, ErrGroupClosed
	}
	if g.last != nil && !g.last.Poll() {
		return nil, ErrDuplicateName
	}
	h := &Handle{done: make(chan struct{}), outs: g.outs, joinRank: -1}
	h.pending.Store(int32(len(g.ents)))
	now := time.Now()
	for _, e := range g.ents {
		e.h = h
		e.enqueued = now
	}
	if err := g.q.addOwned(g.gen, g.ents); err != nil {
		return nil, err
	}
	g.last = h
	g.q.signal()
	return h, nil
}
