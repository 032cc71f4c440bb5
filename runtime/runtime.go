package runtime

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/elastichook"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/gpuexec"
	"github.com/gohorovod/gohorovod/runtime/internal/liveness"
	"github.com/gohorovod/gohorovod/runtime/internal/transport"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// ReduceOp is the reduction of an allreduce or reducescatter, with Horovod's
// names and numbering.
type ReduceOp = wire.ReduceOp

// The reductions.
const (
	Average = wire.Average // sum, then divide by the number of ranks (not on bool tensors)
	Sum     = wire.Sum     // on bool tensors: logical or (Max too; Min and Product are logical and)
	// Adasum is adaptive summation: power-of-two rank counts, host tensors
	// of the four float types (float16 and bfloat16 computed in float32).
	Adasum  = wire.AdasumOp
	Min     = wire.Min
	Max     = wire.Max
	Product = wire.Product
)

// Option configures Init.
type Option func(*options)

type options struct {
	comm    comm.Communicator
	cfg     *config.Config
	logger  *zerolog.Logger
	keepMPI bool
	chunk   *int
	maxFuse *int64
	fuseChk *int
	gpu     gpuexec.Options
	sets    []*ProcessSet // WithProcessSets
	dynamic bool          // WithDynamicProcessSets
}

// WithChunkBytes sets the largest buffer handed to one transport collective:
// larger fused buffers and tensors are reduced in chunks of n bytes (0: no
// chunking). The default comes from cmd/hvdbench's measurements.
// Every rank must give the same value: Init fails otherwise.
func WithChunkBytes(n int) Option { return func(o *options) { o.chunk = &n } }

// WithMaxFusedBytes sets the largest tensor, in bytes, that is copied into
// the fusion buffer with others; larger ones are reduced in place (0: any
// tensor up to the fusion threshold is fused). The default comes from
// cmd/hvdbench's measurements.
// Every rank must give the same value: Init fails otherwise.
func WithMaxFusedBytes(n int64) Option { return func(o *options) { o.maxFuse = &n } }

// WithFusionChunkBytes sets how many bytes of a fused response are copied
// into the fusion buffer, reduced and copied back at a time (0: the whole
// response at once). The default comes from cmd/hvdbench's measurements.
// Every rank must give the same value: Init fails otherwise.
func WithFusionChunkBytes(n int) Option { return func(o *options) { o.fuseChk = &n } }

// WithCommunicator runs the runtime over c (for example one member of
// memcomm.NewGroup, to run N ranks in one process) instead of MPI. The runtime
// does not close c at Shutdown.
func WithCommunicator(c comm.Communicator) Option { return func(o *options) { o.comm = c } }

// WithConfig uses cfg instead of reading the HOROVOD_* environment.
func WithConfig(cfg config.Config) Option { return func(o *options) { o.cfg = &cfg } }

// WithLogger logs through l (a rank field is added) instead of the default
// logger, which writes to standard error at HOROVOD_LOG_LEVEL.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.logger = &l } }

// WithoutMPIFinalize keeps MPI initialised at Shutdown (MPI cannot be
// initialised twice in a process), so that a later Init can run over MPI
// again; the program then calls mpicomm.Finalize itself before exiting.
func WithoutMPIFinalize() Option { return func(o *options) { o.keepMPI = true } }

type state uint8

const (
	stateNew state = iota
	stateRunning
	stateStopped
)

// Runtime is one member of a data-parallel job: it owns a communicator and
// the background loop that negotiates and performs collectives over it. The
// zero value is ready for Init. Its methods are safe for concurrent use.
type Runtime struct {
	mu       sync.Mutex
	st       state
	stopErr  error          // why the loop stopped (nil: clean shutdown)
	live     *liveness.Star // the heartbeat channel, or nil
	cfg      config.Config
	log      zerolog.Logger
	com      comm.Communicator
	ownsComm bool
	keepMPI  bool
	// place is where Init's communicator came from (runtime/internal/
	// transport): its name for the log, MPI's finalization, the elastic
	// session.
	place transport.Place

	rank, size           int
	localRank, localSize int
	crossRank, crossSize int

	q       queue
	stopReq chan struct{} // closed by Shutdown
	stopped chan struct{} // closed when the loop has exited
	loop    *loop
	counter uint64 // for automatic names
	stats   stats
	gpu     *gpuexec.Executor // GPU device, NCCL and buffers (gpu.go, runtime/internal/gpuexec)
	tlc     timelineControl   // StartTimeline and StopTimeline requests (timeline.go)

	// initOpts are the options of the last successful Init, for restart.
	initOpts []Option
	// round is the elastic rendezvous round this runtime was last a member
	// of (0: none, or not elastic); it outlives Shutdown, so that the next
	// Init asks for the round after it.
	round int

	// The process sets (processset.go), guarded by psMu: registered by
	// Init and, when dynamic, by the loop; read by the callers.
	psMu    sync.Mutex
	psets   map[int]*pset // by id; 0 is the global set
	freeIDs []int         // ids of removed sets, reused first, in order
	nextID  int
	dynamic bool   // AddProcessSet and RemoveProcessSet are allowed
	psSeq   uint64 // numbers this process's registrations
	initGen uint64 // counts Inits: a ProcessSet belongs to one

	// nodes holds each rank's node (its lowest rank), fixed at Init, for
	// the hierarchical collectives of every process set (nodes.go).
	nodes []int
}

// Init starts the runtime: it reads the configuration (once), opens the
// communicator, learns the local and cross placement and starts the
// background loop. Every rank must call it.
//
// Without WithCommunicator, Init runs over MPI when an MPI launcher
// (mpirun, srun, Hydra; gohorovodrun uses mpirun) started the process, or
// when the program initialised MPI itself (mpi.Init) first. A process
// started without a launcher runs as rank 0 of a job of one, over a
// one-rank in-memory group that Shutdown closes, in builds with and without
// MPI (MPIEnabled tells which; the debug log names the transport). Started
// as one of several ranks by a binary built without MPI, Init refuses, with
// a message that says how to rebuild.
//
// Init logs a warning for each knob that is set but not implemented yet
// (config.Config.Unimplemented). It fails on every rank, with a
// *config.AgreementError that names each knob and each rank's value, when
// the ranks differ in a knob that must agree: the fusion threshold, cycle
// time and cache capacity (config.Config.Agreed), and the values of
// WithChunkBytes, WithMaxFusedBytes and WithFusionChunkBytes.
func (r *Runtime) Init(opts ...Option) error {
	var o options
	for _, f := range opts {
		f(&o)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st == stateRunning {
		return ErrAlreadyInitialized
	}
	cfg, err := initConfig(o)
	if err != nil {
		return fmt.Errorf("hvd: Horovod initialization failed: %w", err)
	}
	pl, owns := transport.GivenPlace(o.comm), false
	if o.comm == nil {
		// MPI, the embedded transport, or one rank without a launcher.
		if pl, err = transport.Open(cfg, r.round, transport.Env{Lookup: os.LookupEnv, HostLog: consoleLogger(os.Stderr, cfg, 0)}); err != nil {
			return fmt.Errorf("hvd: Horovod initialization failed: %w", err)
		}
		owns = true
		if pl.Elastic() {
			r.round = pl.Round
		}
	}
	com, rank, size := pl.Comm, pl.Comm.Rank(), pl.Comm.Size()
	var log zerolog.Logger
	if o.logger != nil {
		log = o.logger.With().Int("rank", rank).Logger()
	} else {
		log = consoleLogger(os.Stderr, cfg, rank) // logging.go
	}
	warnUnimplemented(log, cfg)
	com, onRing, err := r.placeRanks(com, cfg, pl, log)
	if err != nil {
		return r.initFailed(pl.Comm, owns, err)
	}
	r.cfg, r.log, r.com, r.ownsComm, r.keepMPI, r.place = cfg, log, com, owns, o.keepMPI, pl
	r.rank, r.size = rank, size
	r.stopErr = nil
	r.q.reset()
	r.stopReq = make(chan struct{})
	r.stopped = make(chan struct{})
	r.gpu = gpuexec.New(o.gpu, log)
	l, err := newLoop(r, com, &r.q)
	if err != nil {
		return r.initFailed(com, owns, err)
	}
	r.setDataPath(l, o, onRing)
	if err := r.startLoopParts(l, o); err != nil {
		return r.initFailed(com, owns, err)
	}
	r.loop = l
	r.st = stateRunning
	r.initOpts = append([]Option(nil), opts...)
	running.Add(1)
	go l.run()
	transport.WatchLauncher(cfg, rank, r.stopped, log) // exit if gohorovodrun is gone
	log.Debug().Str("transport", pl.Name).
		Int("size", size).Int("local_rank", r.localRank).Int("local_size", r.localSize).
		Int("cross_rank", r.crossRank).Int("cross_size", r.crossSize).
		Int64("fusion_threshold", cfg.FusionThreshold).Dur("cycle_time", cfg.CycleTime).
		Int("cache_capacity", cfg.CacheCapacity).Msg("hvd initialized")
	return nil
}

// initConfig is the configuration Init runs with: WithConfig's, else the
// environment's, with WithDynamicProcessSets applied.
func initConfig(o options) (config.Config, error) {
	cfg := config.Default()
	if o.cfg != nil {
		cfg = *o.cfg
	} else {
		c, err := config.FromEnv(os.LookupEnv)
		if err != nil {
			return cfg, err
		}
		cfg = c
	}
	if o.dynamic {
		cfg.DynamicProcessSets = true
	}
	return cfg, nil
}

// placeRanks learns this rank's local and cross placement and every rank's
// node over com, and, under MPI, moves the host collectives onto the TCP
// ring where HOROVOD_CPU_OPERATIONS or a measurement says so: it returns
// the communicator to run over, and whether it is the ring. Collective
// over com.
func (r *Runtime) placeRanks(com comm.Communicator, cfg config.Config, pl transport.Place, log zerolog.Logger) (comm.Communicator, bool, error) {
	local, nodes, err := splitNodes(com, cfg, pl.Name == transport.Embedded) // nodes.go
	if err != nil {
		return nil, false, fmt.Errorf("local communicator: %w", err)
	}
	r.nodes = nodes
	cross, err := com.Split(local.Rank(), com.Rank())
	if err != nil {
		local.Close()
		return nil, false, fmt.Errorf("cross communicator: %w", err)
	}
	r.localRank, r.localSize = local.Rank(), local.Size()
	r.crossRank, r.crossSize = cross.Rank(), cross.Size()
	local.Close()
	cross.Close()
	if !pl.MPI() {
		return com, false, nil
	}
	if com.Rank() == 0 {
		for _, s := range pl.Settings() {
			log.Info().Str("variable", s.Name).Str("value", s.Value).Msg("set before MPI_Init: " + s.Why)
		}
	}
	return transport.OpenHostData(com, cfg, nodes, log)
}

// setDataPath sets l's data path: the one for a job over MPI across nodes
// (acrossNodesPath, unless the TCP ring carries the data), then the Init
// options' values.
func (r *Runtime) setDataPath(l *loop, o options, onRing bool) {
	if p, ok := acrossNodesPath(r.cfg, r.place.Name, countNodes(r.nodes)); ok && !onRing { // knobs.go
		r.cfg.FusionThreshold, l.cfg.FusionThreshold = p.fusion, p.fusion
		l.p.chunk, l.p.fuseChunk, l.planner.MaxFused = p.chunk, p.fuseChunk, p.maxFused
		if r.rank == 0 {
			r.log.Info().Int64("fusion_threshold", p.fusion).Msg("the job spans nodes over MPI: one MPI call per fused response, every tensor fused")
		}
	}
	if o.chunk != nil {
		l.p.chunk = max(*o.chunk, 0)
	}
	if o.maxFuse != nil {
		l.planner.MaxFused = max(*o.maxFuse, 0)
	}
	if o.fuseChk != nil {
		l.p.fuseChunk = max(*o.fuseChk, 0)
	}
}

// startLoopParts checks that the ranks agree on the loop's knobs and opens
// what the loop runs with: the doorbell, the hierarchical communicators,
// autotuning, the process sets and the heartbeat star. On failure it
// closes what it opened.
func (r *Runtime) startLoopParts(l *loop, o options) error {
	if err := l.agree(); err != nil {
		return err
	}
	openDoorbell(l.com, l.cfg, l.log.Logger) // loop.go
	all := make([]int, r.size)
	for i := range all {
		all[i] = i
	}
	err := l.openHier(all) // nodes.go
	if err == nil {
		err = l.openTuning() // autotune.go
	}
	if err == nil {
		err = r.initProcessSets(l, o.sets, r.cfg.DynamicProcessSets)
	}
	if err == nil {
		r.live, err = r.startLiveness(r.com, r.cfg, r.place, r.log) // liveness.go
	}
	if err != nil {
		l.p.closeHier()
		l.tl.close(time.Now())
		for _, s := range l.subs {
			s.closeSet()
		}
		r.psMu.Lock()
		r.psets = nil
		r.psMu.Unlock()
	}
	return err
}

func (r *Runtime) initFailed(com comm.Communicator, owns bool, err error) error {
	if owns {
		com.Close()
	}
	return fmt.Errorf("hvd: Horovod initialization failed: %w", err)
}

func zlevel(l config.LogLevel) zerolog.Level {
	switch l {
	case config.LevelTrace:
		return zerolog.TraceLevel
	case config.LevelDebug:
		return zerolog.DebugLevel
	case config.LevelInfo:
		return zerolog.InfoLevel
	case config.LevelError:
		return zerolog.ErrorLevel
	case config.LevelFatal:
		return zerolog.FatalLevel
	}
	return zerolog.WarnLevel
}

// Shutdown stops the runtime on every rank: the loop tells the other ranks,
// all loops stop, and every pending operation on every rank fails with
// ErrShutdown. It waits for this rank's loop to exit, then closes the
// communicator if Init opened it. Shutdown of a runtime that is not running
// returns nil.
func (r *Runtime) Shutdown() error {
	r.mu.Lock()
	if r.st != stateRunning {
		r.mu.Unlock()
		return nil
	}
	stopReq, stopped := r.stopReq, r.stopped
	r.mu.Unlock()
	select {
	case <-stopReq:
	default:
		close(stopReq)
	}
	r.q.signal() // do not wait for the next tick to tell the other ranks
	<-stopped
	if err := r.gpu.Close(); err != nil {
		r.log.Error().Err(err).Msg("releasing GPU resources")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st != stateRunning {
		return nil
	}
	r.st = stateStopped
	running.Add(-1)
	if r.live != nil {
		r.live.Close()
		r.live = nil
	}
	if !r.ownsComm {
		return nil
	}
	if r.place.MPI() && !cleanStop(r.stopErr) {
		// MPI_Comm_free and MPI_Finalize may wait for every rank, and a
		// rank that stalled or froze is not coming: leave MPI as it is,
		// so that this process can end and mpirun ends the job.
		r.log.Warn().AnErr("cause", r.stopErr).Msg("the job ended by failure: MPI is not finalized, so that no rank waits for one that is not coming")
		return nil
	}
	if err := r.com.Close(); err != nil {
		return fmt.Errorf("hvd: shutdown: %w", err)
	}
	if !r.keepMPI {
		if err := r.place.FinalizeMPI(); err != nil {
			return fmt.Errorf("hvd: shutdown: %w", err)
		}
	}
	return nil
}

// cleanStop reports whether the loop stopped because the job was shut
// down (this rank's Shutdown, or another rank's), not because it failed.
func cleanStop(cause error) bool {
	var re *RankError
	return cause == nil || (errors.As(cause, &re) && re.Shutdown)
}

// restart shuts the runtime down (see Shutdown) and initialises it again
// with the options of its last Init. In an elastic job (started by an
// elastic launcher: config.Config.Elastic) that joins the launcher's next
// rendezvous round, which may give this process a new rank and size: it is
// Horovod's reset (hvd.shutdown(); hvd.init()), which optim/elastic's
// Run calls (through internal/elastichook) after a worker failure or a
// change of hosts. A worker that the new round has no place for gets an
// error wrapping ErrRemoved. restart
// refuses a runtime that was given its communicator (WithCommunicator),
// which cannot be opened again, and one that was never initialised.
func (r *Runtime) restart() error {
	r.mu.Lock()
	st, opts := r.st, r.initOpts
	r.mu.Unlock()
	if st == stateNew {
		return r.notInitialized()
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.comm != nil {
		return errors.New("hvd: restart: the runtime was given its communicator (WithCommunicator), which cannot be opened again")
	}
	if err := r.Shutdown(); err != nil {
		r.log.Warn().Err(err).Msg("restart: shutdown")
	}
	return r.Init(opts...)
}

// ErrRemoved is wrapped by the error of Init (and the elastic loop's restart) in a worker of
// an elastic job whose launcher has no place for it in the new round: its
// host was removed or blacklisted, or the job reached --max-np. The
// process should exit; optim/elastic's Run returns it.
var ErrRemoved = transport.ErrRemoved

// ElasticRound returns the elastic rendezvous round this runtime was last a
// member of: 1 after the first Init of an elastic job's worker, growing
// with every restart; 0 when the job is not elastic.
func (r *Runtime) ElasticRound() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.round
}

// HostUpdate is a change of an elastic job's hosts that the launcher
// announced to this worker (rank 0 of its round): Seq grows with every
// update, Added and Removed say what changed.
type HostUpdate = transport.HostUpdate

// takeHostUpdate returns the host updates the launcher has announced to
// this worker since the last call, merged, and whether there were any. The
// launcher announces them to rank 0 of the current round only; optim/
// elastic's State checks them at every Commit and broadcasts rank 0's
// answer, so that every rank resets at the same commit.
func (r *Runtime) takeHostUpdate() (HostUpdate, bool) {
	r.mu.Lock()
	pl, running := r.place, r.st == stateRunning
	r.mu.Unlock()
	if !running {
		return HostUpdate{}, false
	}
	return pl.TakeHostUpdate()
}

// loopExited is called by the loop when it stops, with the cause (nil for a
// clean shutdown requested by some rank).
func (r *Runtime) loopExited(cause error) {
	r.mu.Lock()
	r.stopErr = cause
	r.mu.Unlock()
}

// IsInitialized reports whether Init has succeeded and the loop is running.
func (r *Runtime) IsInitialized() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st != stateRunning {
		return false
	}
	select {
	case <-r.stopped:
		return false
	default:
		return true
	}
}

// placement returns *v, or -1 before Init.
func (r *Runtime) placement(v *int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st == stateNew {
		return -1
	}
	return *v
}

// The placement (rank, size, local and cross rank and size) is fixed at
// Init and stays readable after Shutdown, so these methods return plain
// ints, as Go's other rank-and-size APIs do. Before Init (check
// IsInitialized) each of them returns -1, which no valid rank or size is:
// a program that forgets Init fails visibly instead of running as rank 0
// of a job of one.

// Rank returns this process's rank in [0, Size()), or -1 before Init.
func (r *Runtime) Rank() int { return r.placement(&r.rank) }

// Size returns the number of ranks, or -1 before Init.
func (r *Runtime) Size() int { return r.placement(&r.size) }

// LocalRank returns this process's rank among the processes on its node, or
// -1 before Init.
func (r *Runtime) LocalRank() int { return r.placement(&r.localRank) }

// LocalSize returns the number of processes on this node, or -1 before
// Init.
func (r *Runtime) LocalSize() int { return r.placement(&r.localSize) }

// CrossRank returns the index of this node among the nodes that have a
// process with this local rank, or -1 before Init.
func (r *Runtime) CrossRank() int { return r.placement(&r.crossRank) }

// CrossSize returns the number of nodes that have a process with this local
// rank, or -1 before Init.
func (r *Runtime) CrossSize() int { return r.placement(&r.crossSize) }

// Config returns the configuration Init read.
func (r *Runtime) Config() config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// checkRunning returns the error for an operation on a runtime that is not
// running.
func (r *Runtime) checkRunning() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.st {
	case stateNew:
		return r.notInitialized()
	case stateStopped:
		return &shutdownError{cause: r.stopErr}
	}
	select {
	case <-r.stopped:
		return &shutdownError{cause: r.stopErr}
	default:
	}
	return nil
}

// cycleTime returns the loop period.
func (r *Runtime) cycleTime() time.Duration { return r.cfg.CycleTime }

func init() {
	elastichook.Restart = func(rt any) error { return rt.(*Runtime).restart() }
	elastichook.TakeHostUpdate = func(rt any) (HostUpdate, bool) { return rt.(*Runtime).takeHostUpdate() }
}
