//go:build !mpi || !cgo

package mpicomm

import (
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/mpi"
)

func TestNewNotBuiltIn(t *testing.T) {
	tests := []struct {
		name  string
		env   map[string]string
		words []string
	}{
		{"alone", map[string]string{"OMPI_COMM_WORLD_SIZE": "", "PMI_SIZE": "", "SLURM_STEP_NUM_TASKS": ""}, []string{"not built in", "-tags mpi"}},
		{"under a 3-rank mpirun", map[string]string{"OMPI_COMM_WORLD_SIZE": "3"}, []string{"OMPI_COMM_WORLD_SIZE=3", "-tags mpi"}},
		{"under hydra", map[string]string{"OMPI_COMM_WORLD_SIZE": "", "PMI_SIZE": "2"}, []string{"PMI_SIZE=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := New()
			if c != nil || !errors.Is(err, mpi.ErrNotBuiltIn) {
				t.Fatalf("New = %v, %v; want ErrNotBuiltIn", c, err)
			}
			for _, w := range tt.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if err := Finalize(); err != nil {
		t.Errorf("Finalize without MPI = %v", err)
	}
}
