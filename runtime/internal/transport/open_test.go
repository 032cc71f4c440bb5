package transport

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

func TestUseMPI(t *testing.T) {
	none := mpi.LaunchEnv{}
	one := mpi.LaunchEnv{Var: "OMPI_COMM_WORLD_SIZE", Size: 1}
	four := mpi.LaunchEnv{Var: "SLURM_STEP_NUM_TASKS", Size: 4}
	tests := []struct {
		name         string
		built, mpiUp bool
		launch       mpi.LaunchEnv
		want         bool
	}{
		{"no MPI, alone", false, false, none, false},
		{"no MPI, mpirun -np 1", false, false, one, false},
		{"no MPI, four ranks: MPI's refusal", false, false, four, true},
		{"MPI, alone: one rank, no singleton MPI", true, false, none, false},
		{"MPI, alone, program ran mpi.Init", true, true, none, true},
		{"MPI, mpirun -np 1", true, false, one, true},
		{"MPI, four ranks", true, false, four, true},
	}
	for _, tt := range tests {
		if got := useMPI(tt.built, tt.mpiUp, tt.launch); got != tt.want {
			t.Errorf("%s: useMPI = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestOpenAlone: without a launcher Open gives one rank in memory, whose
// place has no elastic session and nothing of MPI's; HOROVOD_SIZE of
// several ranks without a launcher is refused, saying how to start them.
func TestOpenAlone(t *testing.T) {
	pl, err := Open(config.Default(), 0, Env{Lookup: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Comm.Close()
	if pl.Name != Single || pl.Comm.Size() != 1 || pl.MPI() || pl.Elastic() {
		t.Errorf("alone: %q of %d ranks (MPI %v, elastic %v), want %q of 1", pl.Name, pl.Comm.Size(), pl.MPI(), pl.Elastic(), Single)
	}
	if _, ok := pl.TakeHostUpdate(); ok {
		t.Error("a host update outside an elastic job")
	}
	if err := pl.ReportFrozen(0); err != nil || pl.Settings() != nil || pl.FinalizeMPI() != nil {
		t.Errorf("outside MPI and elastic jobs: ReportFrozen %v, Settings %v", err, pl.Settings())
	}
	cfg := config.Default()
	cfg.Size = 4
	if _, err := Open(cfg, 0, Env{Lookup: noEnv}); err == nil || !strings.Contains(err.Error(), "gohorovodrun or mpirun") {
		t.Errorf("HOROVOD_SIZE=4 alone: %v", err)
	}
}

// TestOpenEmbeddedJob: two workers of one host open the embedded
// transport through the rendezvous, get their ranks, and reduce.
func TestOpenEmbeddedJob(t *testing.T) {
	cfgs := glooJob(t, []rendezvous.Slot{{Host: "h", LocalRank: 0}, {Host: "h", LocalRank: 1}})
	comms := make([]comm.Communicator, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pl Place
			pl, errs[i] = Open(c, 0, Env{Lookup: noEnv})
			comms[i] = pl.Comm
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		defer comms[i].Close()
	}
	errs = commtest.OnRanks(comms, func(c comm.Communicator) error {
		v := tensor.FromInt64([]int64{int64(c.Rank() + 1)})
		if err := c.Allreduce(v, tensor.Sum); err != nil {
			return err
		}
		if c.Size() != 2 || v.Int64s()[0] != 3 {
			return fmt.Errorf("size %d, sum %d", c.Size(), v.Int64s()[0])
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
}
