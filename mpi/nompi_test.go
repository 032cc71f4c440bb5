//go:build !mpi || !cgo

package mpi

import (
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

func TestNotBuiltIn(t *testing.T) {
	t.Setenv("OMPI_COMM_WORLD_SIZE", "")
	t.Setenv("PMI_SIZE", "")
	t.Setenv("SLURM_STEP_NUM_TASKS", "")
	err := Init()
	if !errors.Is(err, ErrNotBuiltIn) || !strings.Contains(err.Error(), "-tags mpi") {
		t.Fatalf("Init = %v, want ErrNotBuiltIn with rebuild advice", err)
	}
	if Built || Initialized() {
		t.Error("Built or Initialized true without MPI")
	}
	if _, err := World(); !errors.Is(err, ErrNotBuiltIn) {
		t.Errorf("World = %v", err)
	}
	var c Comm
	buf := tensor.New(tensor.Float32, 4)
	calls := map[string]error{
		"Allreduce":     c.Allreduce(buf, tensor.Sum),
		"Bcast":         c.Bcast(buf, 0),
		"Allgatherv":    c.Allgatherv(buf, buf, []int{4}),
		"Gatherv":       c.Gatherv(buf, buf, []int{4}, 0),
		"Alltoallv":     c.Alltoallv(buf, []int{4}, buf, []int{4}),
		"ReduceScatter": c.ReduceScatter(buf, buf, []int{4}, tensor.Sum),
		"Barrier":       c.Barrier(),
		"Free":          c.Free(),
	}
	for name, err := range calls {
		if !errors.Is(err, ErrNotBuiltIn) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s = %v, want ErrNotBuiltIn naming the call", name, err)
		}
	}
	if _, err := c.Split(0, 0); !errors.Is(err, ErrNotBuiltIn) {
		t.Errorf("Split = %v", err)
	}
	if _, err := c.SplitShared(); !errors.Is(err, ErrNotBuiltIn) {
		t.Errorf("SplitShared = %v", err)
	}
	if _, err := c.Dup(); !errors.Is(err, ErrNotBuiltIn) {
		t.Errorf("Dup = %v", err)
	}
	if err := Finalize(); err != nil {
		t.Errorf("Finalize = %v", err)
	}
}

func TestNotBuiltInUnderMpirun(t *testing.T) {
	t.Setenv("OMPI_COMM_WORLD_SIZE", "4")
	err := Init()
	if err == nil || !errors.Is(err, ErrNotBuiltIn) || !strings.Contains(err.Error(), "OMPI_COMM_WORLD_SIZE=4") ||
		!strings.Contains(err.Error(), "separate single-rank") {
		t.Fatalf("Init under a 4-rank launcher = %v", err)
	}
}
