//go:build (mpi && cgo) || gloo

package optim

import (
	"context"
	"testing"
	"time"
)

// TestMPIByteGrad: ByteGrad across processes, with and without error
// feedback, leaves on every rank the single-process reference's gradients
// bit for bit, in both bucket layouts, and sends the formula's bytes as
// the runtime counts them (Stats.SentBytes).
func TestMPIByteGrad(t *testing.T) {
	coll := jobColl(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, fb := range []bool{false, true} {
		if err := byteGradRun(ctx, coll, mpiRT.Rank(), 3, fb, func() int64 { return mpiRT.Stats().SentBytes }); err != nil {
			t.Fatalf("rank %d of %d, feedback %v: %v", mpiRT.Rank(), coll.Size(), fb, err)
		}
	}
}
