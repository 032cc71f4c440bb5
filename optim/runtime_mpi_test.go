//go:build (mpi && cgo) || gloo

// The DistributedOptimizer as several processes (scripts/mpitest.sh runs
// this package at np 2, 3 and 4): one Runtime for the whole test binary,
// over MPI under mpirun (built with the "mpi" tag), or over the embedded
// transport under gohorovodrun --gloo (built with the "gloo" tag, no cgo
// needed): Init chooses from the environment.

package optim

import (
	"context"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/jobtest"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

var mpiRT = new(hvd.Runtime)

func TestMain(m *testing.M) {
	jobtest.Main(m, mpiRT, "optim multi-process tests", hvd.WithDynamicProcessSets())
}

// jobColl returns the collectives over the job's runtime, mpiRT.
func jobColl(t *testing.T) Collectives {
	t.Helper()
	coll, err := FromRuntime(mpiRT)
	if err != nil {
		t.Fatal(err)
	}
	return coll
}

// TestMPIEquivalence: every rank trains on its share of the global batch
// over MPI and must end where one process on the whole batch ends.
func TestMPIEquivalence(t *testing.T) {
	const steps = 40
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	coll := jobColl(t)
	rank := mpiRT.Rank()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := equivalenceRun(ctx, coll, rank, coll.Size(), steps)
	if err != nil {
		t.Fatal(err)
	}
	if err := closeTo(got, want, 1e-12); err != nil {
		t.Fatalf("rank %d of %d: %v", rank, coll.Size(), err)
	}
}

// TestMPIOptions: parameter groups (tightly), fp16 compression (closely)
// and Adasum over MPI.
func TestMPIOptions(t *testing.T) {
	const steps = 30
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	coll := jobColl(t)
	rank := mpiRT.Rank()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name string
		opts []DistOption
		tol  float64
	}{
		{"groups", []DistOption{NumGroups(1)}, 1e-12},
		{"fp16", []DistOption{WithCompression(FP16), NumGroups(2)}, 0.02},
	} {
		got, err := equivalenceRunWith(ctx, coll, rank, coll.Size(), steps, c.opts...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := closeTo(got, want, c.tol); err != nil {
			t.Fatalf("%s: rank %d of %d: %v", c.name, rank, coll.Size(), err)
		}
	}
	if size := coll.Size(); size&(size-1) == 0 {
		orth, same, err := adasumRun(ctx, coll, rank, size)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range orth {
			if v != 1 {
				t.Fatalf("Adasum of orthogonal gradients: element %d = %v, want 1", i, v)
			}
		}
		if err := closeTo(same, []float64{2, -1, 0.5}, 1e-6); err != nil {
			t.Fatalf("Adasum of equal gradients: %v", err)
		}
	}
}

// TestMPIObjects: object broadcast and allgather and metric averaging
// across processes.
func TestMPIObjects(t *testing.T) {
	coll := jobColl(t)
	rank := mpiRT.Rank()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := objectChecks(ctx, coll.(GatherCollectives), rank, coll.Size()); err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
}

// TestMPIProcessSets: the even and the odd ranks train the same model (the
// same parameter names) in two process sets at once, each set over its own
// replica of the global batch, and each must end where one process on the
// whole batch ends; then the object helpers run within each set, and
// Adasum within a set is refused (setsEquivalence).
func TestMPIProcessSets(t *testing.T) {
	if mpiRT.Size() < 2 {
		t.Skip("needs two ranks")
	}
	const steps = 20
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := setsEquivalence(ctx, mpiRT, steps, want); err != nil {
		t.Fatalf("rank %d of %d: %v", mpiRT.Rank(), mpiRT.Size(), err)
	}
}
