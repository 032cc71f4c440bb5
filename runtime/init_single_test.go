//go:build !mpi || !cgo

package runtime

import (
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// TestInitAlone: without a launcher, Init gives rank 0 of a job of one, on
// which every collective works; the runtime owns its one-rank group, so
// Init works again after Shutdown.
func TestInitAlone(t *testing.T) {
	noLauncher(t)
	prev := SetDefault(new(Runtime))
	defer SetDefault(prev)
	for round := range 2 {
		l, buf := debugLog()
		if err := Init(WithConfig(testConfig()), WithLogger(l)); err != nil {
			t.Fatalf("round %d: Init alone: %v", round, err)
		}
		if !strings.Contains(buf.String(), `"transport":"single"`) {
			t.Errorf("Init's log does not name the one-rank transport: %s", buf)
		}
		if MPIEnabled() {
			t.Error("MPIEnabled for a process alone")
		}
		if _, err := MPIThreadsSupported(); err == nil {
			t.Error("MPIThreadsSupported without MPI succeeded")
		}
		if err := checkOneRank(ctxT(t), Default()); err != nil {
			t.Error(err)
		}
		if err := Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	if n := running.Load(); n != 0 {
		t.Errorf("%d Runtimes counted as running after Shutdown", n)
	}
}

// TestInitRefusesLauncherWithoutMPI: started as one of several ranks, a
// binary without MPI refuses (the ranks would each run alone); a launch of
// one rank is one rank.
func TestInitRefusesLauncherWithoutMPI(t *testing.T) {
	tests := []struct {
		name, env, value string
	}{
		{"mpirun -np 2", "OMPI_COMM_WORLD_SIZE", "2"},
		{"hydra", "PMI_SIZE", "3"},
		{"srun -n 4", "SLURM_STEP_NUM_TASKS", "4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noLauncher(t)
			t.Setenv(tt.env, tt.value)
			r := new(Runtime)
			err := r.Init(WithConfig(testConfig()))
			if !errors.Is(err, mpi.ErrNotBuiltIn) {
				t.Fatalf("Init = %v, want ErrNotBuiltIn", err)
			}
			for _, w := range []string{"initialization failed", tt.env + "=" + tt.value, "built without MPI", "-tags mpi"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if r.IsInitialized() || r.Rank() != -1 {
				t.Error("a refused Init left the runtime initialised")
			}
		})
	}
	t.Run("mpirun -np 1", func(t *testing.T) {
		noLauncher(t)
		t.Setenv("OMPI_COMM_WORLD_SIZE", "1")
		r := new(Runtime)
		if err := r.Init(WithConfig(testConfig())); err != nil {
			t.Fatal(err)
		}
		defer r.Shutdown()
		if r.Size() != 1 || r.MPIEnabled() {
			t.Errorf("size %d, MPIEnabled %v; want one rank without MPI", r.Size(), r.MPIEnabled())
		}
	})
	t.Run("HOROVOD_SIZE without a launcher", func(t *testing.T) {
		noLauncher(t)
		cfg := testConfig()
		cfg.Size = 4
		err := new(Runtime).Init(WithConfig(cfg))
		if err == nil || !strings.Contains(err.Error(), config.EnvSize+"=4") {
			t.Errorf("Init = %v, want a refusal naming HOROVOD_SIZE=4", err)
		}
	})
}
