package optim

import (
	"context"
	"fmt"
	"testing"
	"time"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// algorithmsInSets runs ByteGrad (with feedback), QAdam and Zero (stages
// 1 and 2) within this rank's process set of the even or the odd ranks
// (both sets at once, under the same names): each must match its
// references over its own members only (Zero's stage 2 bit for bit with
// rsExact, see zeroRun).
func algorithmsInSets(ctx context.Context, r *hvd.Runtime, rsExact bool) error {
	coll, mine, other, err := paritySets(ctx, r)
	if err != nil {
		return err
	}
	rank := mine.Rank()
	if err := byteGradRun(ctx, coll, rank, 2, true, nil); err != nil {
		return fmt.Errorf("ByteGrad within %v: %w", mine, err)
	}
	if _, err := qadamRun(ctx, coll, rank, 4); err != nil {
		return fmt.Errorf("QAdam within %v: %w", mine, err)
	}
	for _, stage := range []int{1, 2} {
		if err := zeroRun(ctx, coll, rank, stage, tensor.Float64, rsExact); err != nil {
			return fmt.Errorf("Zero within %v: %w", mine, err)
		}
	}
	return removeSets(ctx, r, mine, other)
}

// TestAlgorithmsInProcessSets: ByteGrad, QAdam and Zero within process
// sets of 2 and 1 ranks (np 3) and of 2 and 2 (np 4).
func TestAlgorithmsInProcessSets(t *testing.T) {
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts := startRuntimes(t, n, hvd.WithDynamicProcessSets())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			onRanks(t, n, func(rank int) error { return algorithmsInSets(ctx, rts[rank], true) })
		})
	}
}
