package optim

import (
	"context"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

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
