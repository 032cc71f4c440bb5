//go:build (mpi && cgo) || gloo

// SyncBatchNorm as several processes (scripts/mpitest.sh runs this
// package at np 2, 3 and 4): one Runtime for the whole test binary, over
// MPI under mpirun (built with the "mpi" tag), or over the embedded
// transport under gohorovodrun --gloo (built with the "gloo" tag). Every
// rank computes the reference on the concatenated batch itself, from the
// same deterministic seed.

package nn

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/jobtest"
	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

var mpiRT = new(hvd.Runtime)

func TestMain(m *testing.M) {
	jobtest.Main(m, mpiRT, "optim/nn multi-process tests", hvd.WithDynamicProcessSets())
}

// mpiCounts returns the per-rank row counts of the multi-process checks
// at size ranks: even, uneven, and uneven with rank 1 empty.
func mpiCounts(size int) [][]int {
	even, uneven, empty := make([]int, size), make([]int, size), make([]int, size)
	for r := range size {
		even[r] = 4
		uneven[r] = 1 + 2*r
		empty[r] = 3 + r
	}
	empty[1] = 0
	return [][]int{even, uneven, empty}
}

// TestMPISyncBatchNorm: across processes, a sync layer's output, dx,
// summed weight and bias gradients, running statistics (three steps) and
// evaluation output equal single-process batch normalisation of the
// concatenated batch (float64 to 1e-9 relative, float32 to 1e-6), with
// even, uneven and empty per-rank batches.
func TestMPISyncBatchNorm(t *testing.T) {
	coll, err := optim.FromRuntime(mpiRT)
	if err != nil {
		t.Fatal(err)
	}
	rank := mpiRT.Rank()
	t.Logf("rank %d of %d", rank, coll.Size())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for k, counts := range mpiCounts(coll.Size()) {
		if err := syncCheck[float64](ctx, coll, fmt.Sprint("mpibn64.", k), rank, counts, 3, uint64(k)); err != nil {
			t.Fatalf("rank %d of %d, float64 %v: %v", rank, coll.Size(), counts, err)
		}
		if err := syncCheck[float32](ctx, coll, fmt.Sprint("mpibn32.", k), rank, counts, 3, uint64(k)); err != nil {
			t.Fatalf("rank %d of %d, float32 %v: %v", rank, coll.Size(), counts, err)
		}
	}
}

// TestMPISyncBatchNormProcessSets: the even and the odd ranks each
// normalise within their own process set (at least two ranks: np >= 3
// gives a set of two; at np 2 each set is one rank, which still must
// match its own batch).
func TestMPISyncBatchNormProcessSets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := setsCheck(ctx, mpiRT); err != nil {
		t.Fatalf("rank %d: %v", mpiRT.Rank(), err)
	}
}
