package optim

import (
	"context"
	"fmt"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// NoPeer, as the destination or the source of an exchange, means that this
// rank sends, or receives, nothing.
const NoPeer = hvd.NoPeer

// ExchangeCollectives is a Collectives that can also exchange a tensor
// point to point (hvd.Runtime.ExchangeAsync): the decentralized algorithms
// need it. FromRuntime and FromProcessSet return one; within a process set,
// ranks are ranks within the set.
type ExchangeCollectives interface {
	Collectives
	Ranker
	// ExchangeAsync starts sending t to rank dest and receiving, into out,
	// what rank source sends this rank, under name (the same on every
	// rank, as for any collective). Every rank of the group calls it; when
	// rank r sends to d, d receives from r, and d's out holds as many
	// elements, of the same dtype, as r's t. dest or source may be this
	// rank (a copy) or NoPeer. out is written by the time Wait returns nil.
	ExchangeAsync(t, out *tensor.Tensor, dest, source int, name string) (Waiter, error)
}

var _ ExchangeCollectives = (*runtimeCollectives)(nil)

// ExchangeAsync starts the runtime's Exchange of t, flattened, within the
// set; the waiter copies what arrives into out.
func (c *runtimeCollectives) ExchangeAsync(t, out *tensor.Tensor, dest, source int, name string) (Waiter, error) {
	if source != NoPeer && (out == nil || out.DType() != t.DType()) {
		return nil, fmt.Errorf("optim: exchange %q: the receive buffer must be a %v tensor", name, t.DType())
	}
	flat, err := t.Reshape(t.Len())
	if err != nil {
		return nil, err
	}
	h, err := c.r.ExchangeAsync(flat, dest, source, name, c.set...)
	if err != nil {
		return nil, err
	}
	return exchangeWaiter{h: h, out: out, name: name, receives: source != NoPeer}, nil
}

// exchangeWaiter copies what the runtime received into the caller's buffer
// once the exchange completes.
type exchangeWaiter struct {
	h        *hvd.Handle
	out      *tensor.Tensor
	name     string
	receives bool // from a source, not NoPeer
}

// Wait waits for the exchange and copies the received tensor into out.
func (w exchangeWaiter) Wait(ctx context.Context) error {
	if err := w.h.Wait(ctx); err != nil {
		return err
	}
	if !w.receives {
		return nil
	}
	got := w.h.Output()
	if lenOf(got) != lenOf(w.out) {
		return fmt.Errorf("optim: exchange %q: received %d elements into a buffer of %d", w.name, lenOf(got), lenOf(w.out))
	}
	copy(w.out.Bytes(), got.Bytes())
	return nil
}

func lenOf(t *tensor.Tensor) int {
	if t == nil {
		return 0
	}
	return t.Len()
}

// AlltoallCollectives is a Collectives that can also alltoall: ByteGrad,
// QAdam and the sharded optimizer's stage 2 need it (with
// GatherCollectives' allgather).
type AlltoallCollectives interface {
	Collectives
	// Alltoall sends rows splits[r] of t (in order along the first
	// dimension) to rank r under name, and returns the rows received from
	// every rank, concatenated in rank order, with the number of rows that
	// came from each.
	Alltoall(ctx context.Context, t *tensor.Tensor, splits []int, name string) (*tensor.Tensor, []int, error)
}

var _ AlltoallCollectives = (*runtimeCollectives)(nil)

func (c *runtimeCollectives) Alltoall(ctx context.Context, t *tensor.Tensor, splits []int, name string) (*tensor.Tensor, []int, error) {
	return c.r.Alltoall(ctx, t, splits, name, c.set...)
}

// ShardRange returns the range [lo, hi) of n elements that rank owns when
// they are cut into size ranges, in rank order, of n/size elements, the
// first n mod size ranges one more (the runtime's reducescatter splits
// rows so): the sharded optimizer's ranges and ByteGrad's chunks.
func ShardRange(n, size, rank int) (lo, hi int) {
	q, r := n/size, n%size
	lo = rank*q + min(rank, r)
	return lo, lo + hvd.ReducescatterRows(n, size, rank)
}
