package optim

import (
	"context"
	"fmt"

	"github.com/gohorovod/gohorovod/tensor"
)

// zeroSplits returns, for the elements [off, off+n) of the flat space of
// total elements cut among size ranks, how many fall in each rank's range.
func zeroSplits(off, n, total, size int) []int {
	s := make([]int, size)
	for r := range s {
		lo, hi := ShardRange(total, size, r)
		s[r] = max(0, min(hi, off+n)-max(lo, off))
	}
	return s
}

// startGrad starts, at stage 2, the reduction of parameter i's gradient
// to the owners of its elements: an alltoall sends each owner its part,
// and each rank sums the parts it receives (in rank order) into its
// piece of the gradient, divided by the number of ranks.
func (z *Zero) startGrad(i int) (Waiter, error) {
	if z.flight[i] != nil {
		return nil, fmt.Errorf("%w: %q reported twice", ErrTooManyPasses, z.params[i].Name)
	}
	p := z.params[i]
	splits := zeroSplits(z.offs[i], p.Grad.Len(), z.n, z.size)
	send := elems(p.Grad, 0, p.Grad.Len())
	piece := zeroPiece{param: i, a: -1}
	for _, pc := range z.pieces {
		if pc.param == i {
			piece = pc
		}
	}
	w := Async(func() error {
		got, _, err := z.coll.(AlltoallCollectives).Alltoall(context.Background(), send, splits, z.name+".grad."+p.Name)
		if err != nil || piece.a < 0 {
			return err
		}
		sumBlocks(got, z.size, elems(p.Grad, piece.a, piece.b))
		return nil
	})
	z.flight[i] = w
	return w, nil
}

// sumBlocks writes into dst the mean of the size equal blocks of got:
// their sum in block order, scaled by 1/size as the runtime's Average
// scales.
func sumBlocks(got *tensor.Tensor, size int, dst *tensor.Tensor) {
	m := dst.Len()
	if dst.DType() == tensor.Float32 {
		sumBlocksOf(got.Float32s(), size, m, dst.Float32s())
	} else {
		sumBlocksOf(got.Float64s(), size, m, dst.Float64s())
	}
	tensor.ScaleTensor(dst, 1/float64(size))
}

func sumBlocksOf[T float](got []T, size, m int, dst []T) {
	copy(dst, got[:m])
	for r := 1; r < size; r++ {
		for k, v := range got[r*m : (r+1)*m] {
			dst[k] += v
		}
	}
}

// reduceStage2 starts the gradients not reported Ready and waits for
// every parameter's reduction; after an error it still waits for the
// others, then returns the first.
func (z *Zero) reduceStage2(ctx context.Context) error {
	var first error
	for i := range z.params {
		if z.flight[i] == nil {
			if _, err := z.startGrad(i); err != nil && first == nil {
				first = err
			}
		}
	}
	for i, w := range z.flight {
		if w == nil {
			continue
		}
		err := w.Wait(ctx)
		if ctx.Err() != nil && err == ctx.Err() {
			return err // the reductions go on; the step stays in flight
		}
		z.flight[i] = nil
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}
