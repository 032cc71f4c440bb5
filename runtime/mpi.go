package runtime

import (
	"errors"
	"fmt"
	"os"

	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/comm/mpicomm"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// mpiNotEnabledText is Horovod's error when MPI queries are made without MPI.
const mpiNotEnabledText = "Horovod MPI is not enabled; Please make sure it's installed and enabled."

func openMPI() (comm.Communicator, error) { return mpicomm.New() }

// The transports a Runtime can run over, as its log reports them.
const (
	transportMPI    = "mpi"    // Init opened MPI's world
	transportSingle = "single" // Init opened a one-rank in-memory group
	transportGiven  = "given"  // WithCommunicator
)

// useMPI decides what Init runs over when it is given no communicator: MPI
// (true), or one rank in memory (false, the same results as Horovod at size
// 1). built says whether MPI support is compiled in, mpiUp whether the
// program initialised MPI itself (mpi.Init) before Init, and launch what
// the environment says about an MPI launcher (mpirun, Hydra, srun).
//
//   - A launcher that announced several ranks: MPI. Without MPI built in,
//     opening it fails with the message that says how to rebuild, rather
//     than running the ranks as separate single-rank jobs.
//   - MPI built in and a launcher of one rank, or MPI already initialised:
//     MPI, as under Horovod.
//   - Otherwise, one rank in memory, in both builds. An MPI build could run
//     MPI as a singleton instead (Open MPI supports it), but that slows
//     Init and Shutdown down (docs/BENCHMARKS.md), needs Open MPI's orted
//     on the PATH, and when it cannot start one it ends the
//     process inside MPI_Init_thread, before any error can be returned; nor
//     could such a program Init again after Shutdown (MPI starts once per
//     process). A program that wants MPI at one rank calls mpi.Init itself
//     first, or runs under `mpirun -np 1`.
func useMPI(built, mpiUp bool, launch mpi.LaunchEnv) bool {
	return launch.Size > 1 || (built && (launch.Size == 1 || mpiUp))
}

// openDefault opens the communicator Init runs over when it is given none,
// and names its transport: the embedded transport when the environment
// selects it (config.Config.Gloo: HOROVOD_CONTROLLER=gloo or a rendezvous
// address, as gohorovodrun --gloo sets), else MPI or one rank (see useMPI). A HOROVOD_SIZE of several ranks
// without an MPI launcher is refused: gohorovod takes its placement from
// MPI, so those ranks would each run alone.
func openDefault(cfg config.Config, lastRound int) (comm.Communicator, string, error) {
	if !cfg.Gloo() {
		// The launcher's variables choose the transport, as MPI's do,
		// even when the program passes its own configuration
		// (WithConfig(config.Default()), say): otherwise every worker
		// of a --gloo job would run alone.
		if env, err := config.FromEnv(os.LookupEnv); err == nil && env.Gloo() {
			cfg = withGloo(cfg, env)
		}
	}
	if cfg.RendezvousAddress() == "" {
		// Started by srun, torchrun, PyTorchJob or Volcano, which give
		// a placement but host no gohorovod rendezvous.
		p, ok, err := placedBy(cfg, os.LookupEnv)
		if err != nil {
			return nil, "", fmt.Errorf("embedded transport: %w", err)
		}
		if ok {
			c, err := openPlaced(cfg, p, os.LookupEnv)
			return c, transportEmbedded, err
		}
	}
	if cfg.Gloo() {
		// Started without MPI by gohorovodrun --gloo, or by hand with
		// the same variables (docs/EMBEDDED.md).
		c, err := openEmbedded(cfg, lastRound)
		return c, transportEmbedded, err
	}
	if useMPI(mpi.Built, mpi.Initialized(), mpi.DetectLaunch(os.Getenv)) {
		c, err := newMPI()
		return c, transportMPI, err
	}
	if cfg.Size > 1 {
		return nil, "", fmt.Errorf("%s=%d says that this process is one of %d ranks, but no MPI launcher "+
			"(mpirun, srun, Hydra) started it, and gohorovod takes the placement from MPI: "+
			"start the job with gohorovodrun or mpirun", config.EnvSize, cfg.Size, cfg.Size)
	}
	return memcomm.NewGroup(1)[0], transportSingle, nil
}

// withGloo is cfg with the embedded transport's settings (the controller,
// the rendezvous, the secret, the worker's placement) taken from env.
func withGloo(cfg, env config.Config) config.Config {
	cfg.Controller, cfg.CPUOperations = env.Controller, env.CPUOperations
	cfg.RendezvousAddr, cfg.RendezvousPort = env.RendezvousAddr, env.RendezvousPort
	cfg.GlooTimeout, cfg.GlooIface, cfg.GlooAddr, cfg.Secret = env.GlooTimeout, env.GlooIface, env.GlooAddr, env.Secret
	cfg.GlooSocketDir = env.GlooSocketDir
	cfg.Rank, cfg.Size = env.Rank, env.Size
	cfg.LocalRank, cfg.LocalSize = env.LocalRank, env.LocalSize
	cfg.CrossRank, cfg.CrossSize = env.CrossRank, env.CrossSize
	cfg.Hostname = env.Hostname
	cfg.Elastic = env.Elastic
	return cfg
}

// MPIBuilt reports whether this binary was built with MPI support (the "mpi"
// build tag).
func MPIBuilt() bool { return mpi.Built }

// MPIEnabled reports whether this runtime runs over MPI: Init opened MPI's
// world, because it was given no communicator and an MPI launcher started
// the process (or the program initialised MPI itself). It is false before
// Init, for a runtime given its communicator (WithCommunicator, RunLocal),
// and for a process started without a launcher, which runs as one rank in
// memory (see Init).
func (r *Runtime) MPIEnabled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st != stateNew && r.transport == transportMPI
}

// MPIThreadsSupported reports whether MPI was initialised with
// MPI_THREAD_MULTIPLE, which gohorovod always requests and requires; it is an
// error when the runtime does not run over MPI.
func (r *Runtime) MPIThreadsSupported() (bool, error) {
	if err := r.checkRunning(); err != nil && errors.Is(err, ErrNotInitialized) {
		return false, err
	}
	if !r.MPIEnabled() {
		return false, errors.New("hvd: " + mpiNotEnabledText)
	}
	return mpi.Initialized(), nil
}
