//go:build (mpi && cgo) || gloo

package optim

import (
	"context"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// TestMPIAsyncModelAverage: the scenarios of async_test.go as processes;
// every rank gathers the others' final weights and rounds to check them.
func TestMPIAsyncModelAverage(t *testing.T) {
	n, rank := mpiRT.Size(), mpiRT.Rank()
	coll := jobColl(t)
	for _, name := range []string{"uneven-steps", "abort-resume-uneven"} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := asyncRun(ctx, coll, rank, n, asyncPlans(rank)[name])
			if err != nil {
				t.Fatalf("rank %d: %v", rank, err)
			}
			mine := append(res.x, float64(res.rounds))
			all, err := mpiRT.Allgather(ctx, tensor.FromFloat64(mine), "async."+name)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]asyncResult, n)
			for i := range n {
				v := all.Float64s()[i*len(mine) : (i+1)*len(mine)]
				got[i] = asyncResult{x: v[:len(v)-1], rounds: int(v[len(v)-1])}
			}
			if err := checkAsync(got, 2); err != nil {
				t.Fatalf("rank %d of %d: %v", rank, n, err)
			}
		})
	}
}
