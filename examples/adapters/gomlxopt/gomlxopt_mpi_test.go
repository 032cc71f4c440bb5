//go:build (mpi && cgo) || gloo

// The equivalence under a real launcher (make test-adapters runs this
// package under mpirun at np 2 and 3, and under gohorovodrun --gloo at
// np 2): one Runtime for the whole test binary.

package gomlxopt

import (
	"context"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/jobtest"
	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

var mpiRT = new(hvd.Runtime)

func TestMain(m *testing.M) {
	jobtest.Main(m, mpiRT, "gomlxopt multi-process tests")
}

// TestMPIEquivalence: the job's ranks on b rows each, through the runtime,
// end where one process (GoMLX's own trainer, run on every rank) ends on
// size·b rows, and every rank holds rank 0's variables.
func TestMPIEquivalence(t *testing.T) {
	const b, steps = 8, 4
	coll, err := optim.FromRuntime(mpiRT)
	if err != nil {
		t.Fatal(err)
	}
	size, rank := coll.Size(), mpiRT.Rank()
	x, y := batchData(size*b*steps, 5)
	want, wantLoss := reference(t, adam, steps, size*b, x, y)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got, ls, err := runRank(ctx, coll, rank, size, b, steps, adam, x, y)
	if err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	if d := maxRelDiff(t, got, want); d > equivalenceTol {
		t.Errorf("rank %d of %d: variables differ from one process on the whole batch by %g > %g", rank, size, d, equivalenceTol)
	}
	for s := range steps {
		if d := ls[s] - wantLoss[s]; d > equivalenceTol*(1+wantLoss[s]) || -d > equivalenceTol*(1+wantLoss[s]) {
			t.Errorf("step %d: loss %g, one process %g", s, ls[s], wantLoss[s])
		}
	}
}
