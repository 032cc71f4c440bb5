package optim

import (
	"context"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// AlltoallCollectives is a Collectives that can also alltoall: ByteGrad
// and QAdam need it (with GatherCollectives' allgather).
type AlltoallCollectives interface {
	Collectives
	// Alltoall sends rows splits[r] of t (in order along the first
	// dimension) to rank r under name, and returns the rows received from
	// every rank, concatenated in rank order, with the number of rows that
	// came from each.
	Alltoall(ctx context.Context, t *tensor.Tensor, splits []int, name string) (*tensor.Tensor, []int, error)
}

// ReducescatterCollectives is a Collectives that can also reducescatter:
// the sharded optimizer's stage 2 needs it.
type ReducescatterCollectives interface {
	Collectives
	// Reducescatter combines t across ranks under name with op (Sum or
	// Average) and returns this rank's share of the first dimension: the
	// first dim0 mod Size ranks get dim0/Size+1 rows, the others dim0/Size
	// (ShardRange's split).
	Reducescatter(ctx context.Context, t *tensor.Tensor, name string, op tensor.ReduceOp) (*tensor.Tensor, error)
}

var (
	_ AlltoallCollectives      = (*runtimeCollectives)(nil)
	_ ReducescatterCollectives = (*runtimeCollectives)(nil)
)

func (c *runtimeCollectives) Alltoall(ctx context.Context, t *tensor.Tensor, splits []int, name string) (*tensor.Tensor, []int, error) {
	return c.r.Alltoall(ctx, t, splits, name, c.set...)
}

func (c *runtimeCollectives) Reducescatter(ctx context.Context, t *tensor.Tensor, name string, op tensor.ReduceOp) (*tensor.Tensor, error) {
	return c.r.Reducescatter(ctx, t, name, op, c.set...)
}

// ShardRange returns the range [lo, hi) of n elements that rank owns when
// they are cut into size ranges, in rank order, of n/size elements, the
// first n mod size ranges one more: the split of the runtime's
// reducescatter, which the sharded optimizer and ByteGrad's chunks use.
func ShardRange(n, size, rank int) (lo, hi int) {
	q, r := n/size, n%size
	lo = rank*q + min(rank, r)
	return lo, lo + hvd.ReducescatterRows(n, size, rank)
}
