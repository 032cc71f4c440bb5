//go:build (mpi && cgo) || gloo

package optim

import (
	"context"
	"testing"
	"time"
)

// TestMPIQAdam: QAdam across processes: after the warm-up, every step
// exchanges exactly the single-process reference's averaged momenta and
// steps by the formula with the second moment frozen.
func TestMPIQAdam(t *testing.T) {
	coll := jobColl(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := qadamRun(ctx, coll, mpiRT.Rank(), 5); err != nil {
		t.Fatalf("rank %d of %d: %v", mpiRT.Rank(), coll.Size(), err)
	}
}
