//go:build (mpi && cgo) || gloo

package optim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// TestMPILowPrecisionDecentralized: every rank's weights match the
// single-process reference of lowprecision_test.go, and equal its
// neighbours' replicas of them, as processes (every rank gathers every
// rank's run to check the replicas).
func TestMPILowPrecisionDecentralized(t *testing.T) {
	const steps = 10
	n, rank := mpiRT.Size(), mpiRT.Rank()
	coll := jobColl(t)
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("interval%d", k), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run, err := lowPrecisionRun(ctx, coll, rank, n, steps, k)
			if err != nil {
				t.Fatalf("rank %d: %v", rank, err)
			}
			var flat []float64
			for _, st := range run {
				flat = append(append(append(flat, st.x...), st.left...), st.right...)
			}
			all, err := mpiRT.Allgather(ctx, tensor.FromFloat64(flat), fmt.Sprintf("lowprec.runs.%d", k))
			if err != nil {
				t.Fatal(err)
			}
			runs, w, per := make([][]lowPrecisionStep, n), decD+1, len(flat)
			for i := range n {
				v := all.Float64s()[i*per : (i+1)*per]
				for s := range steps {
					o := s * 3 * w
					runs[i] = append(runs[i], lowPrecisionStep{x: v[o : o+w], left: v[o+w : o+2*w], right: v[o+2*w : o+3*w]})
				}
			}
			if err := checkLowPrecision(runs, lowPrecisionReference(t, n, steps, k), k); err != nil {
				t.Fatalf("rank %d of %d: %v", rank, n, err)
			}
		})
	}
}
