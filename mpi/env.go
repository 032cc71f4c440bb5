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
// its core instead of spinning. Init sets it to 1 unless it is set already
// (0 where the job spans nodes: AcrossNodes).
const YieldEnv = "OMPI_MCA_mpi_yield_when_idle"

// Open MPI's parameters that choose its allreduce algorithm: with dynamic
// rules on, coll_tuned_allreduce_algorithm forces one (4 is the ring).
const (
	DynamicRulesEnv       = "OMPI_MCA_coll_tuned_use_dynamic_rules"
	AllreduceAlgorithmEnv = "OMPI_MCA_coll_tuned_allreduce_algorithm"
)

// Open MPI's per-process placement variables, read by AcrossNodes.
const (
	envOMPILocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE"
)

// Setting is one environment variable that Init sets before MPI_Init.
type Setting struct {
	Name, Value string
	Why         string // for the log
}

// MPISettings returns the Open MPI parameters that Init sets before
// MPI_Init where the user has not set them (lookup is os.LookupEnv in
// production); Open MPI reads them from each process's environment, so
// plain mpirun gains them as the launcher does.
//
//   - One node: yield while waiting (YieldEnv=1). A gohorovod rank has two
//     busy threads, training and the runtime's loop waiting in MPI; where
//     ranks fill the cores, a spinning wait takes the core from training,
//     and overlapping communication with backward can make a step slower
//     than the two in series (examples/synthetic's steps/s with and without
//     it are in docs/BENCHMARKS.md).
//   - Across nodes (mpirun placed fewer ranks on this node than the job
//     has: AcrossNodes): no yielding, and the ring allreduce. Over TCP,
//     Open MPI's default rules pick, for large buffers, algorithms that
//     send each byte more than once across the slowest link, and a rank
//     that yields in its progress loop halves its own transfer rate on a
//     busy node (both measured on the emulated cluster, docs/BENCHMARKS.md,
//     "Across nodes"). The ring sends 2(n-1)/n of the buffer per rank,
//     the least any allreduce can; Open MPI's ring falls back to recursive
//     doubling by itself for buffers of fewer elements than ranks.
//
// A user's choice of either parameter of the algorithm keeps both as the
// user left them.
func MPISettings(lookup func(string) (string, bool)) []Setting {
	var out []Setting
	set := func(name, value, why string) {
		if _, ok := lookup(name); !ok {
			out = append(out, Setting{Name: name, Value: value, Why: why})
		}
	}
	if !AcrossNodes(lookup) {
		set(YieldEnv, "1", "ranks share this node's cores with training: wait without spinning")
		return out
	}
	set(YieldEnv, "0", "the job spans nodes: a yielding progress loop halves the transfer rate")
	_, dyn := lookup(DynamicRulesEnv)
	_, alg := lookup(AllreduceAlgorithmEnv)
	if !dyn && !alg {
		set(DynamicRulesEnv, "1", "the job spans nodes: choose the allreduce algorithm")
		set(AllreduceAlgorithmEnv, "4", "the job spans nodes: the ring sends the least over the links")
	}
	return out
}

// AcrossNodes reports whether mpirun placed this process in a job that
// spans nodes: fewer ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE) than
// in the job (OMPI_COMM_WORLD_SIZE). Without Open MPI's variables it says
// no.
func AcrossNodes(lookup func(string) (string, bool)) bool {
	get := func(k string) int {
		v, _ := lookup(k)
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0
		}
		return n
	}
	local, world := get(envOMPILocalSize), get(envOMPIWorldSize)
	return local > 0 && world > local
}

// applySettings sets MPISettings in this process's environment and returns
// what it set.
func applySettings() []Setting {
	s := MPISettings(os.LookupEnv)
	for _, x := range s {
		os.Setenv(x.Name, x.Value)
	}
	return s
}

// SLURM's variables in every task that srun starts, and the PMIx variable
// through which an srun with --mpi=pmix reaches MPI.
const (
	envSlurmStepID   = "SLURM_STEP_ID"
	envSlurmStepOld  = "SLURM_STEPID"
	envSlurmMPIType  = "SLURM_MPI_TYPE"
	envPMIxRank      = "PMIX_RANK"
	envPMIRank       = "PMI_RANK"
	envPMISize       = "PMI_SIZE"
	envOMPIWorldSize = "OMPI_COMM_WORLD_SIZE"
)

// StartedByMPI reports whether an MPI process manager placed this
// process: mpirun's (OMPI_COMM_WORLD_SIZE), a PMI's (PMI_SIZE: Hydra, srun
// --mpi=pmi2) or PMIx's (PMIX_RANK: srun --mpi=pmix). Unlike DetectLaunch
// it does not count a task of a bare srun step, which gives MPI no way in.
func StartedByMPI(getenv func(string) string) bool {
	return getenv(envOMPIWorldSize) != "" || getenv(envPMISize) != "" || getenv(envPMIxRank) != ""
}

// CheckSrun decides, before MPI_Init, whether a process that SLURM's srun
// started can reach MPI, and returns an error that says what to do when it
// cannot. library names the MPI the binary links ("Open MPI" or "MPICH").
//
// A task of an srun step (SLURM_STEP_ID set) meets MPI through the PMI
// that srun's --mpi plugin serves. Open MPI as Debian and most
// distributions build it speaks PMIx only: started by a bare srun (no
// --mpi=pmix, so no PMIX_RANK) it aborts inside MPI_Init_thread with a
// text about rebuilding, before any program can report anything, even
// with one task. MPICH also accepts srun's PMI-2 (--mpi=pmi2, PMI_RANK).
// A rank that mpirun started inside an allocation (OMPI_COMM_WORLD_SIZE
// set) is no srun task of ours and passes, as does any process outside a
// step (a batch script's own shell, a login node).
func CheckSrun(getenv func(string) string, library string) error {
	if getenv(envSlurmStepID) == "" && getenv(envSlurmStepOld) == "" {
		return nil
	}
	if getenv(envOMPIWorldSize) != "" || getenv(envPMIxRank) != "" {
		return nil
	}
	if library == "MPICH" && getenv(envPMIRank) != "" {
		return nil
	}
	plugin := strings.TrimSpace(getenv(envSlurmMPIType))
	if plugin == "" {
		plugin = "none"
	}
	want := "--mpi=pmix"
	if library == "MPICH" {
		want = "--mpi=pmix (or --mpi=pmi2)"
	}
	return fmt.Errorf("mpi: srun started this process with its MPI plugin %q, through which %s cannot start: "+
		"run `srun %s ...` (`srun --mpi=list` shows the plugins your SLURM has), "+
		"or use gohorovod's embedded transport, which needs no MPI under srun "+
		"(set HOROVOD_CONTROLLER=gloo, or build without the mpi tag): %w",
		plugin, library, want, ErrSrunPMI)
}
