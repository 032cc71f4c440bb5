//go:build (mpi && cgo) || gloo

package runtime

import (
	"fmt"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

// Under real mpirun (np 2 and 3): the added dtypes over MPI's
// datatypes, grouped allgather and reducescatter, and Adasum of the half
// types (power-of-two sizes only).

func TestMPINewDTypes(t *testing.T) {
	r, _ := mpiRuntime(t, false)
	if err := checkNewDTypes(mpiCtx(t), r, r.Rank(), r.Size()); err != nil {
		t.Fatalf("rank %d: %v", r.Rank(), err)
	}
}

func TestMPIGrouped(t *testing.T) {
	r, _ := mpiRuntime(t, false)
	ctx := mpiCtx(t)
	for _, check := range []func() error{
		func() error { return checkGroupedAllgather(ctx, r, r.Rank(), r.Size()) },
		func() error { return checkGroupedReducescatter(ctx, r, r.Rank(), r.Size()) },
		func() error { return checkGroupedMismatch(ctx, r, r.Rank()) },
	} {
		if err := check(); err != nil {
			t.Fatalf("rank %d: %v", r.Rank(), err)
		}
	}
}

func TestMPIAdasumHalf(t *testing.T) {
	r, _ := mpiRuntime(t, false)
	size := r.Size()
	if size&(size-1) != 0 {
		t.Skip("Adasum needs a power-of-two number of ranks")
	}
	for _, dt := range []tensor.DType{tensor.Float16, tensor.BFloat16} {
		in, _ := adasumInput(dt, r.Rank(), 37)
		out, err := r.Allreduce(mpiCtx(t), in, fmt.Sprint("adasum.", dt), Adasum, Postscale(1.0/3))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkAdasumHalf(dt, out, size, 37, 1.0/3); err != nil {
			t.Errorf("rank %d: %v", r.Rank(), err)
		}
	}
}
