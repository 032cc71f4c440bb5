package runtime

import (
	"context"
	"fmt"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// NoPeer, as the destination or the source of an Exchange, means that this
// rank sends, or receives, nothing.
const NoPeer = comm.NoPeer

// exchangePeers are the two peers of an exchange entry, ranks within its
// process set.
type exchangePeers struct{ dest, source int }

// ExchangeAsync enqueues a point-to-point exchange: t goes to rank dest and
// the result is the tensor that rank source sends this rank (ranks within
// the process set of the call, InProcessSet; this rank itself, for a copy;
// or NoPeer, to send or receive nothing: the result then has zero rows).
// Every rank of the set calls it under the same name, as for any
// collective, and the pairs must match: when rank r sends to d, d receives
// from r. A pairwise swap is ExchangeAsync(t, p, p, ...) on both ranks, a
// shift along a ring ExchangeAsync(t, (r+1)%n, (r+n-1)%n, ...).
//
// The ranks agree, before any data moves, on who sends to whom; pairs that
// do not match fail every rank's handle with an error that names them, and
// the runtime keeps working. As for Alltoall, the first dimension may
// differ across ranks and the others must agree (Horovod's shape texts);
// Handle.Output is the received tensor. Device tensors are not supported.
func (r *Runtime) ExchangeAsync(t *tensor.Tensor, dest, source int, name string, opts ...CallOption) (*Handle, error) {
	p, _, err := r.resolve("Exchange", false, opts)
	if err != nil {
		return nil, err
	}
	if err := r.checkTensor(t); err != nil {
		return nil, err
	}
	switch {
	case t.Device().Kind != tensor.CPU:
		return nil, invalid("Exchange supports host tensors only, not a tensor on %v", t.Device())
	case len(t.Shape()) == 0:
		return nil, invalid("exchange of a rank-zero tensor")
	case dest < NoPeer || dest >= p.size:
		return nil, invalid("Exchange destination rank %d is out of range for a process set of %d ranks (NoPeer is %d).", dest, p.size, NoPeer)
	case source < NoPeer || source >= p.size:
		return nil, invalid("Exchange source rank %d is out of range for a process set of %d ranks (NoPeer is %d).", source, p.size, NoPeer)
	}
	h := newHandle(1)
	e := r.newEntry(p, wire.Alltoall, r.opName("exchange", name), t, nil, h, 0)
	e.exchange = &exchangePeers{dest: dest, source: source}
	if err := r.enqueue(p, e); err != nil {
		return nil, err
	}
	return h, nil
}

// Exchange is the blocking form of ExchangeAsync; it returns the tensor
// received from source.
func (r *Runtime) Exchange(ctx context.Context, t *tensor.Tensor, dest, source int, name string, opts ...CallOption) (*tensor.Tensor, error) {
	h, err := r.ExchangeAsync(t, dest, source, name, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Wait(ctx); err != nil {
		return nil, err
	}
	return h.Output(), nil
}

// exchange performs an exchange entry: one allgather of every rank's
// (destination, source, rows) tells each rank what it receives and lets
// every rank check, alike, that the pairs match; then comm.Exchange moves
// the data.
func (p *performer) exchange(e *entry) error {
	n := p.size
	mine := []int64{int64(e.exchange.dest), int64(e.exchange.source), int64(e.in.Shape()[0])}
	all := make([]int64, 3*n)
	counts := make([]int, n)
	for i := range counts {
		counts[i] = 3
	}
	if err := p.com.Allgatherv(tensor.FromInt64(mine), tensor.FromInt64(all), counts); err != nil {
		return err
	}
	if detail := exchangeMismatch(all, n); detail != "" {
		return &comm.MismatchError{Source: "hvd", Op: "exchange", Detail: detail}
	}
	shape := wire.IntShape(e.req.Shape)
	shape[0] = 0
	if s := e.exchange.source; s != NoPeer {
		shape[0] = int(all[3*s+2])
	}
	e.out = tensor.New(e.req.DType, shape...)
	send := e.in
	if e.exchange.dest == NoPeer {
		send = tensor.New(e.req.DType, 0)
	}
	return comm.Exchange(p.com, send, e.exchange.dest, e.out, e.exchange.source)
}

// exchangeMismatch returns what is wrong with the ranks' pairs (all holds
// each rank's destination, source and rows), or "" when every destination
// names its sender as source and every source its receiver as destination.
// Every rank computes the same answer from the same table.
func exchangeMismatch(all []int64, n int) string {
	peer := func(v int64) string {
		if v == NoPeer {
			return "no rank"
		}
		return fmt.Sprintf("rank %d", v)
	}
	for q := range n {
		if d := all[3*q]; d != NoPeer && all[3*d+1] != int64(q) {
			return fmt.Sprintf("rank %d sends to rank %d, but rank %d receives from %s", q, d, d, peer(all[3*d+1]))
		}
		if s := all[3*q+1]; s != NoPeer && all[3*s] != int64(q) {
			return fmt.Sprintf("rank %d receives from rank %d, but rank %d sends to %s", q, s, s, peer(all[3*s]))
		}
	}
	return ""
}
