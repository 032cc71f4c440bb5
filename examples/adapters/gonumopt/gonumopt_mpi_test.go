//go:build mpi && cgo

// The distributed objective under real mpirun (make test-adapters runs this
// package at np 2 and 4): one Runtime over MPI for the whole test binary.

package gonumopt

import (
	"context"
	"slices"
	"testing"
	"time"

	"gonum.org/v1/gonum/optimize"

	"github.com/gohorovod/gohorovod/internal/jobtest"
	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

var mpiRT = new(hvd.Runtime)

func TestMain(m *testing.M) {
	jobtest.Main(m, mpiRT, "gonumopt MPI tests")
}

// TestMPIMatchesOneProcess: every rank minimises over its shard of the data
// with BFGS and Newton and must end at the minimiser of one process on the
// whole data, every rank at the same point.
func TestMPIMatchesOneProcess(t *testing.T) {
	data := makeData(301)
	coll, err := optim.FromRuntime(mpiRT)
	if err != nil {
		t.Fatal(err)
	}
	rank := mpiRT.Rank()
	size := coll.Size()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range methods {
		if m.name != "BFGS" && m.name != "Newton" {
			continue
		}
		full := data.local()
		want, err := minimize(optimize.Problem{Func: full.Func, Grad: full.Grad, Hess: full.Hess}, m.new())
		if err != nil {
			t.Fatal(err)
		}
		obj, err := New(coll, data.shard(rank, size).local(), WithName("mpi."+m.name), WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		got, err := minimize(obj.Problem(), m.new())
		if err != nil {
			t.Fatalf("rank %d of %d, %s: %v", rank, size, m.name, err)
		}
		if err := within(got.X, want.X, m.tol); err != nil {
			t.Errorf("rank %d of %d, %s: %v", rank, size, m.name, err)
		}
		// Every rank at the same point: the minimum over ranks equals the
		// maximum.
		lo, err := mpiRT.Allreduce(ctx, tensor.FromFloat64(slices.Clone(got.X)), "mpi.check.min."+m.name, hvd.Min)
		if err != nil {
			t.Fatal(err)
		}
		hi, err := mpiRT.Allreduce(ctx, tensor.FromFloat64(slices.Clone(got.X)), "mpi.check.max."+m.name, hvd.Max)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(lo.Float64s(), hi.Float64s()) {
			t.Errorf("%s: ranks ended at different points: min %v, max %v", m.name, lo.Float64s(), hi.Float64s())
		}
	}
}
