//go:build (mpi && cgo) || gloo

package optim

import (
	"context"
	"testing"
	"time"
)

// TestMPIOwnGradientSlices: a model that writes into the gradient slices
// it wrapped itself trains, with the DistributedOptimizer's default
// options, with and without Ready, exactly as one process on the global
// batch does (scripts/mpitest.sh runs it under mpirun and under
// gohorovodrun --gloo, at np 2, 3 and 4).
func TestMPIOwnGradientSlices(t *testing.T) {
	const steps = 20
	want, err := trainOwnSlices(context.Background(), nil, 0, 1, steps, false)
	if err != nil {
		t.Fatal(err)
	}
	coll := jobColl(t)
	rank, size := mpiRT.Rank(), coll.Size()
	if 24%size != 0 {
		t.Skipf("the global batch of 24 does not split over %d ranks", size)
	}
	for _, report := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		got, err := trainOwnSlices(ctx, coll, rank, size, steps, report)
		cancel()
		if err != nil {
			t.Fatalf("Ready %v: rank %d of %d: %v", report, rank, size, err)
		}
		if err := closeTo(got, want, 1e-12); err != nil {
			t.Fatalf("Ready %v: rank %d of %d: %v", report, rank, size, err)
		}
	}
}
