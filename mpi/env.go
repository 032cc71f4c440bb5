package mpi

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// launcherVars are the variables through which MPI launchers tell each
// process the size of the job: Open MPI's mpirun, then MPICH's Hydra (and
// other PMI launchers, srun --mpi=pmi2 among them), then SLURM's srun,
// which sets SLURM_STEP_NUM_TASKS in every task of a job step whatever its
// MPI plugin (a batch script, or a shell in an allocation, is not a step
// and has none). An mpirun started inside a step sets its own variable,
// which comes first.
var launcherVars = []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}

// LaunchEnv is what the environment says about the launcher that started
// this process.
type LaunchEnv struct {
	Var  string // the variable that announced the job, e.g. "OMPI_COMM_WORLD_SIZE"; empty if none
	Size int    // the number of ranks it announced (0 if none)
}

// DetectLaunch reads the launcher variables through getenv (os.Getenv in
// production) and reports the first one that holds a positive integer.
// Values that do not parse are ignored.
func DetectLaunch(getenv func(string) string) LaunchEnv {
	for _, v := range launcherVars {
		s := strings.TrimSpace(getenv(v))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			continue
		}
		return LaunchEnv{Var: v, Size: n}
	}
	return LaunchEnv{}
}

// CheckLaunch decides whether a process may go on as an MPI rank. built says
// whether MPI support is compiled in, library names the MPI it links (for
// the message), and mpiSize is the world size MPI reported (ignored when
// built is false). It refuses, with an error that names the variable and
// says how to rebuild, when the launcher announced more than one rank and
// the process would run alone: built without MPI, or linked against an MPI
// that did not recognise the launcher.
func CheckLaunch(env LaunchEnv, built bool, library string, mpiSize int) error {
	if env.Size <= 1 {
		return nil
	}
	if !built {
		return fmt.Errorf("mpi: started by an MPI launcher as one of %d ranks (%s=%d), "+
			"but this binary was built without MPI and would run as %d separate single-rank jobs: %w",
			env.Size, env.Var, env.Size, env.Size, ErrNotBuiltIn)
	}
	if mpiSize == 1 {
		return fmt.Errorf("mpi: the launcher announced %d ranks (%s=%d) but %s reports a world of 1: "+
			"this binary is linked against a different MPI than the launcher that started it; "+
			"start it with the mpirun of %s (or srun with an --mpi plugin that it supports), or rebuild for the other MPI (`go build -tags mpi` for Open MPI, "+
			"`-tags mpi,mpich` for MPICH; see the mpi package documentation)",
			env.Size, env.Var, env.Size, library, library)
	}
	return nil
}

// YieldEnv is the Open MPI parameter that makes a rank waiting in MPI yield
// its core instead of spinning. Init sets it to 1 unless it is set already.
const YieldEnv = "OMPI_MCA_mpi_yield_when_idle"

// yieldWhenIdle sets YieldEnv (read by MPI_Init) unless the user chose. A
// gohorovod rank always has two busy threads, training and the runtime's
// loop waiting in MPI; where ranks fill the cores, a spinning wait takes the
// core from training, and overlapping communication with backward can make
// a step slower than the two in series. Yielding gives the core back
// (examples/synthetic's steps/s and overlap with and without it are in
// docs/BENCHMARKS.md).
func yieldWhenIdle() {
	if _, set := os.LookupEnv(YieldEnv); !set {
		os.Setenv(YieldEnv, "1")
	}
}
