package transport

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/comm/mpicomm"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// The transports a Runtime can run over, as its log reports them.
const (
	MPI      = "mpi"      // Open opened MPI's world
	Single   = "single"   // Open opened a one-rank in-memory group
	Embedded = "embedded" // Open joined the embedded (pure Go) transport
	Given    = "given"    // the program gave its communicator (WithCommunicator)
)

// HostUpdate is a change of an elastic job's hosts that the launcher
// announced to this worker (rank 0 of its round).
type HostUpdate = rendezvous.HostUpdate

// ErrRemoved is wrapped by Open's error in a worker of an elastic job whose
// launcher has no place for it in the new round.
var ErrRemoved = rendezvous.ErrRemoved

// Setting is a variable set before MPI_Init, with why, for the log.
type Setting = mpi.Setting

// Env is what Open reads besides the configuration.
type Env struct {
	// Lookup reads the environment (os.LookupEnv in a program).
	Lookup func(string) (string, bool)
	// HostLog receives what a rendezvous this rank hosts reports (rank 0
	// of a job placed by srun or torch's variables without a store).
	HostLog zerolog.Logger
}

// Place is what Open opened: the communicator, the transport's name, and
// what the runtime needs to know of this process's place in the job.
type Place struct {
	// Comm is the opened communicator; its Close closes all that Open
	// opened for it (listeners, the elastic session, a hosted rendezvous).
	Comm comm.Communicator
	// Name is MPI, Single, Embedded or Given.
	Name string
	// Round is the elastic rendezvous round joined (see Elastic).
	Round int

	session *rendezvous.Session // elastic jobs only
	slots   []rendezvous.Slot   // slots[r] is rank r's (elastic jobs)
}

// GivenPlace is the place of a runtime given its communicator.
func GivenPlace(c comm.Communicator) Place { return Place{Comm: c, Name: Given} }

// MPI reports whether the place is MPI's world.
func (p Place) MPI() bool { return p.Name == MPI }

// Elastic reports whether the place is a round of an elastic job's
// rendezvous (Round is then that round).
func (p Place) Elastic() bool { return p.session != nil }

// TakeHostUpdate returns the host updates the launcher has announced to
// this worker since the last call, merged, and whether there were any;
// false outside an elastic job.
func (p Place) TakeHostUpdate() (HostUpdate, bool) {
	if p.session == nil {
		return HostUpdate{}, false
	}
	return p.session.TakeUpdate()
}

// ReportFrozen tells an elastic job's launcher that rank froze, so that it
// stops the worker and the others re-form without it; it does nothing
// outside an elastic job.
func (p Place) ReportFrozen(rank int) error {
	if p.session == nil || rank < 0 || rank >= len(p.slots) {
		return nil
	}
	return p.session.ReportFrozen(p.slots[rank])
}

// Settings returns the variables set before MPI_Init where the place is
// MPI's, for the log; nil otherwise.
func (p Place) Settings() []Setting {
	if !p.MPI() {
		return nil
	}
	return mpicomm.Settings()
}

// FinalizeMPI finalizes MPI where the place is MPI's (after Comm is
// closed); it does nothing elsewhere.
func (p Place) FinalizeMPI() error {
	if !p.MPI() {
		return nil
	}
	return mpicomm.Finalize()
}

// Built reports whether this binary was built with MPI support (the "mpi"
// build tag).
func Built() bool { return mpi.Built }

// MPIInitialized reports whether MPI is initialised in this process.
func MPIInitialized() bool { return mpi.Initialized() }

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

// Open opens the communicator Init runs over when it is given none, and
// names its transport: the embedded transport when the environment
// selects it (config.Config.Gloo: HOROVOD_CONTROLLER=gloo or a rendezvous
// address, as gohorovodrun --gloo sets), or when srun, torchrun, a
// PyTorchJob or Volcano placed the worker (see placedBy); else MPI or one
// rank (see useMPI). A HOROVOD_SIZE of several ranks without an MPI
// launcher is refused: gohorovod takes its placement from MPI, so those
// ranks would each run alone. lastRound is the elastic round this worker
// was last a member of (0 at the first Init).
func Open(cfg config.Config, lastRound int, env Env) (Place, error) {
	if !cfg.Gloo() {
		// The launcher's variables choose the transport, as MPI's do,
		// even when the program passes its own configuration
		// (WithConfig(config.Default()), say): otherwise every worker
		// of a --gloo job would run alone.
		if e, err := config.FromEnv(env.Lookup); err == nil && e.Gloo() {
			cfg = withGloo(cfg, e)
		}
	}
	if cfg.RendezvousAddress() == "" {
		// Started by srun, torchrun, PyTorchJob or Volcano, which give
		// a placement but host no gohorovod rendezvous.
		p, ok, err := placedBy(cfg, env.Lookup)
		if err != nil {
			return Place{}, fmt.Errorf("embedded transport: %w", err)
		}
		if ok {
			return openPlaced(cfg, p, env)
		}
	}
	if cfg.Gloo() {
		// Started without MPI by gohorovodrun --gloo, or by hand with
		// the same variables (docs/EMBEDDED.md).
		return openEmbedded(cfg, lastRound, nil, nil)
	}
	if useMPI(mpi.Built, mpi.Initialized(), mpi.DetectLaunch(getenv(env.Lookup))) {
		c, err := mpicomm.New()
		return Place{Comm: c, Name: MPI}, err
	}
	if cfg.Size > 1 {
		return Place{}, fmt.Errorf("%s=%d says that this process is one of %d ranks, but no MPI launcher "+
			"(mpirun, srun, Hydra) started it, and gohorovod takes the placement from MPI: "+
			"start the job with gohorovodrun or mpirun", config.EnvSize, cfg.Size, cfg.Size)
	}
	return Place{Comm: memcomm.NewGroup(1)[0], Name: Single}, nil
}

// getenv is lookup as os.Getenv reads: "" for an unset variable.
func getenv(lookup func(string) (string, bool)) func(string) string {
	return func(k string) string { v, _ := lookup(k); return v }
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
