//go:build (mpi && cgo) || gloo

package optim

import (
	"context"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// TestMPIZero: Zero stages 1 and 2 across processes end with the
// DistributedOptimizer's parameters (SGD bit for bit at stage 1, Adam
// within 1e-6), hold only their range of the state, and consolidate the
// unsharded optimizer's state.
func TestMPIZero(t *testing.T) {
	coll := jobColl(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, stage := range []int{1, 2} {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64} {
			if err := zeroRun(ctx, coll, mpiRT.Rank(), stage, dt, false); err != nil {
				t.Fatalf("rank %d of %d: %v", mpiRT.Rank(), coll.Size(), err)
			}
		}
	}
}

// TestMPIAlgorithmsInProcessSets: ByteGrad, QAdam and Zero within the
// process sets of the even and of the odd ranks, across processes.
func TestMPIAlgorithmsInProcessSets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := algorithmsInSets(ctx, mpiRT, false); err != nil {
		t.Fatalf("rank %d of %d: %v", mpiRT.Rank(), mpiRT.Size(), err)
	}
}
