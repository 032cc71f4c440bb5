package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// The environment variables, one constant per knob. The launcher and the
// runtime both use these names; nothing else in gohorovod spells them.
const (
	EnvFusionThreshold        = "HOROVOD_FUSION_THRESHOLD"
	EnvCycleTime              = "HOROVOD_CYCLE_TIME"
	EnvCacheCapacity          = "HOROVOD_CACHE_CAPACITY"
	EnvTimeline               = "HOROVOD_TIMELINE"
	EnvTimelineMarkCycles     = "HOROVOD_TIMELINE_MARK_CYCLES"
	EnvStallCheckDisable      = "HOROVOD_STALL_CHECK_DISABLE"
	EnvStallCheckTime         = "HOROVOD_STALL_CHECK_TIME_SECONDS"
	EnvStallShutdownTime      = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"
	EnvHeartbeatTimeout       = "HOROVOD_HEARTBEAT_TIMEOUT_SECONDS"
	EnvLogLevel               = "HOROVOD_LOG_LEVEL"
	EnvLogHideTime            = "HOROVOD_LOG_HIDE_TIME"
	EnvHierarchicalAllreduce  = "HOROVOD_HIERARCHICAL_ALLREDUCE"
	EnvHierarchicalAllgather  = "HOROVOD_HIERARCHICAL_ALLGATHER"
	EnvMPIThreadsDisable      = "HOROVOD_MPI_THREADS_DISABLE"
	EnvDynamicProcessSets     = "HOROVOD_DYNAMIC_PROCESS_SETS"
	EnvAutotune               = "HOROVOD_AUTOTUNE"
	EnvAutotuneLog            = "HOROVOD_AUTOTUNE_LOG"
	EnvAutotuneWarmupSamples  = "HOROVOD_AUTOTUNE_WARMUP_SAMPLES"
	EnvAutotuneStepsPerSample = "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"
	EnvAutotuneMaxSamples     = "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"
	EnvAutotuneNoise          = "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"
	// EnvAgreementSleepMax is gohorovod's own: the longest sleep of the
	// per-cycle agreement's patient wait over MPI, in microseconds.
	EnvAgreementSleepMax = "GOHOROVOD_AGREEMENT_SLEEP_MAX"
	// EnvAgreementDoorbell is gohorovod's own: whether the patient waits
	// over MPI also sleep on the node's doorbell (1, the default) or only
	// on their timer (0).
	EnvAgreementDoorbell = "GOHOROVOD_AGREEMENT_DOORBELL"
	// EnvStaticSchedule is gohorovod's own: how many rounds in a row of
	// the same cached responses, in the same order, lock the static
	// schedule (0: never).
	EnvStaticSchedule = "GOHOROVOD_STATIC_SCHEDULE"

	// The process placement, set by a launcher that does not start the
	// workers through MPI (MPI itself tells an MPI-started worker). Not
	// implemented yet: the runtime's placement comes from its communicator.
	EnvRank      = "HOROVOD_RANK"
	EnvSize      = "HOROVOD_SIZE"
	EnvLocalRank = "HOROVOD_LOCAL_RANK"
	EnvLocalSize = "HOROVOD_LOCAL_SIZE"
	EnvCrossRank = "HOROVOD_CROSS_RANK"
	EnvCrossSize = "HOROVOD_CROSS_SIZE"
	EnvHostname  = "HOROVOD_HOSTNAME"

	// EnvLauncher identifies the gohorovodrun process that started the
	// job (gohorovod's own variable, not Horovod's): the runtime in each
	// worker that can see that process exits when it is gone.
	EnvLauncher = "GOHOROVOD_LAUNCHER"

	// The embedded (Gloo-style) transport: how a worker started without
	// MPI finds the job's rendezvous server, proves that it belongs to the
	// job, and where it listens. Horovod's names where Horovod has them.
	EnvController     = "HOROVOD_CONTROLLER"
	EnvCPUOperations  = "HOROVOD_CPU_OPERATIONS"
	EnvRendezvousAddr = "HOROVOD_GLOO_RENDEZVOUS_ADDR"
	EnvRendezvousPort = "HOROVOD_GLOO_RENDEZVOUS_PORT"
	EnvGlooTimeout    = "HOROVOD_GLOO_TIMEOUT_SECONDS"
	EnvGlooIface      = "HOROVOD_GLOO_IFACE"
	EnvGlooAddr       = "GOHOROVOD_GLOO_ADDR" // gohorovod's own
	// EnvGlooSocketDir is the directory for the worker's Unix sockets,
	// which the launcher creates for the job (mode 0700) and removes when
	// the job ends (gohorovod's own).
	EnvGlooSocketDir = "GOHOROVOD_GLOO_SOCKET_DIR"
	EnvSecret        = "GOHOROVOD_SECRET" // gohorovod's own
	// EnvElastic marks a worker of an elastic job, as horovodrun's elastic
	// driver does: "1" or unset.
	EnvElastic = "HOROVOD_ELASTIC"
)

// The values of HOROVOD_CONTROLLER and HOROVOD_CPU_OPERATIONS.
const (
	ControllerMPI  = "mpi"
	ControllerGloo = "gloo"
)

// TimelineDynamic is the Timeline (HOROVOD_TIMELINE) value that enables the
// timeline without a file at start: Runtime.StartTimeline starts one later.
const TimelineDynamic = "DYNAMIC"

// Defaults. They are Horovod's, except DefaultFusionThreshold.
const (
	// DefaultFusionThreshold is the largest fused response in bytes.
	// Horovod's is 128 MiB; on one node such a buffer falls out of the
	// caches. 4 MiB was chosen by a sweep of ResNet-50's gradients with
	// cmd/hvdbench (across nodes over MPI the runtime raises it to 128
	// MiB, where the link and not the cache sets the pace); since the runtime fuses
	// only small tensors and copies a fused response through the buffer in
	// cache-sized pieces, neighbouring sizes do no better
	// (docs/BENCHMARKS.md).
	DefaultFusionThreshold int64 = 4 << 20
	// DefaultCycleTime is the background loop's period.
	DefaultCycleTime = time.Millisecond
	// DefaultCacheCapacity is the number of response cache entries.
	DefaultCacheCapacity = 1024
	// DefaultStallCheckTime is how long a tensor may wait for the remaining
	// ranks before the stall inspector warns.
	DefaultStallCheckTime = 60 * time.Second
	// DefaultStallShutdownTime is how long a stall may last before the job
	// shuts down; 0 means never.
	DefaultStallShutdownTime time.Duration = 0
	// DefaultHeartbeatTimeout is how long a rank may send no heartbeat
	// before it is declared frozen. Heartbeats come from a goroutine of
	// their own, so slow user code (a long data loader, a checkpoint write)
	// does not delay them; only a stopped or wedged process does.
	DefaultHeartbeatTimeout = 30 * time.Second
	// DefaultLogLevel is the least severe level that is logged.
	DefaultLogLevel = LevelWarning
	// DefaultAutotuneWarmupSamples is how many autotuning samples are
	// discarded at the start.
	DefaultAutotuneWarmupSamples = 3
	// DefaultAutotuneStepsPerSample is how many steps make one sample.
	DefaultAutotuneStepsPerSample = 10
	// DefaultAutotuneMaxSamples bounds the Bayesian optimisation.
	DefaultAutotuneMaxSamples = 20
	// DefaultAutotuneNoise is the Gaussian process noise, in [0, 1].
	DefaultAutotuneNoise = 0.8
	// DefaultGlooTimeout bounds the rendezvous of a job without MPI, as in
	// Horovod (HOROVOD_GLOO_TIMEOUT_SECONDS, 30).
	DefaultGlooTimeout = 30 * time.Second
	// DefaultAgreementSleepMax is the longest sleep of the per-cycle
	// agreement's patient wait over MPI (docs/TUNING.md has the
	// measurements behind it).
	DefaultAgreementSleepMax = 200 * time.Microsecond
	// DefaultStaticSchedule is how many identical rounds lock the static
	// schedule (docs/TUNING.md).
	DefaultStaticSchedule = 3
)

// Secret is the job's key in hex (GOHOROVOD_SECRET): every connection of
// the embedded transport and of its rendezvous proves knowledge of it
// (internal/job/secret). It formats as "[redacted]" with every fmt verb, so
// that printing a Config never shows it; string(s) is the value.
type Secret string

// String implements fmt.Stringer without the value.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString implements fmt.GoStringer without the value.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// Bytes decodes the hex key; an empty Secret is an error.
func (s Secret) Bytes() ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("no job secret: %s is not set", EnvSecret)
	}
	b, err := hex.DecodeString(string(s))
	if err != nil {
		return nil, errors.New("not hex")
	}
	if len(b) < minSecretBytes {
		return nil, fmt.Errorf("%d bytes, want at least %d", len(b), minSecretBytes)
	}
	return b, nil
}

// minSecretBytes is the shortest key accepted, as internal/job/secret's
// Parse.
const minSecretBytes = 16

// Unset marks a placement field (Rank, Size, ...) that the environment does
// not give.
const Unset = -1

// Config holds every knob gohorovod reads. The zero value is not useful:
// start from Default or FromEnv. A few knobs are accepted but not
// implemented yet (see Unimplemented); the knobs that every rank must hold
// alike are listed by Agreed.
type Config struct {
	// FusionThreshold is the fusion buffer size in bytes; 0 disables
	// fusion. HOROVOD_FUSION_THRESHOLD.
	FusionThreshold int64
	// CycleTime is the background loop's period. HOROVOD_CYCLE_TIME, in
	// (possibly fractional) milliseconds.
	CycleTime time.Duration
	// CacheCapacity is the number of response cache entries; 0 disables
	// the cache. HOROVOD_CACHE_CAPACITY.
	CacheCapacity int
	// Timeline is the file rank 0 writes the timeline to: a Chrome trace
	// (chrome://tracing, Perfetto) with a row per tensor name, showing its
	// negotiation across ranks and each phase of its operations. Empty
	// means no timeline; TimelineDynamic ("DYNAMIC") starts without a file
	// but lets Runtime.StartTimeline start one later, which it refuses
	// when Timeline is empty. HOROVOD_TIMELINE.
	Timeline string
	// TimelineMarkCycles marks each background cycle in the timeline
	// (CYCLE_START instants) of the file Timeline names; StartTimeline
	// takes its own. HOROVOD_TIMELINE_MARK_CYCLES.
	TimelineMarkCycles bool
	// StallCheckDisable turns the stall inspector off.
	// HOROVOD_STALL_CHECK_DISABLE.
	StallCheckDisable bool
	// StallCheckTime is how long a tensor submitted by some ranks waits for
	// the others before the stall inspector warns.
	// HOROVOD_STALL_CHECK_TIME_SECONDS.
	StallCheckTime time.Duration
	// StallShutdownTime is how long such a stall may last before the whole
	// job shuts down; 0 means never. As in Horovod, a value below
	// StallCheckTime is accepted but means never (the runtime warns).
	// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS.
	StallShutdownTime time.Duration
	// HeartbeatTimeout is how long a rank may send nothing on the
	// heartbeat channel (a channel of its own beside the data path) before
	// it is declared frozen: every rank then names it, and the job ends,
	// under MPI too. 0 turns the check off. Rank 0's value is the job's.
	// HOROVOD_HEARTBEAT_TIMEOUT_SECONDS.
	HeartbeatTimeout time.Duration
	// LogLevel is the least severe level that is logged. HOROVOD_LOG_LEVEL.
	LogLevel LogLevel
	// LogHideTime leaves timestamps out of log lines. HOROVOD_LOG_HIDE_TIME.
	LogHideTime bool
	// HierarchicalAllreduce reduces host tensors as Horovod's hierarchical
	// allreduce does: reduce-scatter within the node, allreduce of each
	// piece across nodes among the ranks with the same local rank,
	// allgather within the node. It is ignored, with a log line, when the
	// job (or process set) has one node. HOROVOD_HIERARCHICAL_ALLREDUCE.
	HierarchicalAllreduce bool
	// HierarchicalAllgather gathers within the node, allgathers across
	// nodes among the nodes' first ranks and broadcasts within the node.
	// HOROVOD_HIERARCHICAL_ALLGATHER.
	HierarchicalAllgather bool
	// DynamicProcessSets allows process sets to be added and removed after
	// Init (Runtime.AddProcessSet, RemoveProcessSet).
	// HOROVOD_DYNAMIC_PROCESS_SETS.
	DynamicProcessSets bool
	// MPIThreadsDisable asks, in Horovod, for MPI_THREAD_SINGLE instead of
	// MPI_THREAD_MULTIPLE. HOROVOD_MPI_THREADS_DISABLE. Not implemented yet:
	// gohorovod always asks for, and requires, MPI_THREAD_MULTIPLE; setting
	// it logs a warning at Init.
	MPIThreadsDisable bool
	// Autotune tunes FusionThreshold and CycleTime while training runs:
	// rank 0 scores each setting by the bytes allreduced per second and
	// picks the next by Bayesian optimisation, then tries the categorical
	// knobs off and on (the hierarchical ones where the job spans several
	// nodes, the response cache) and the runtime's piece sizes, and keeps
	// the best. Knobs set away from their defaults stay fixed.
	// HOROVOD_AUTOTUNE.
	Autotune bool
	// AutotuneLog is a CSV file where rank 0 records each scored setting,
	// in Horovod's format; empty means none. HOROVOD_AUTOTUNE_LOG.
	AutotuneLog string
	// AutotuneWarmupSamples is how many scores are discarded first.
	// HOROVOD_AUTOTUNE_WARMUP_SAMPLES.
	AutotuneWarmupSamples int
	// AutotuneStepsPerSample is how many training steps make one sample
	// (a step ends when a tensor name is allreduced again).
	// HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE.
	AutotuneStepsPerSample int
	// AutotuneMaxSamples bounds the Bayesian optimisation.
	// HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES.
	AutotuneMaxSamples int
	// AutotuneNoise is the Gaussian process noise, in [0, 1].
	// HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE.
	AutotuneNoise float64

	// Rank, Size, LocalRank, LocalSize, CrossRank and CrossSize are the
	// process placement that a launcher which does not start workers
	// through MPI would give (HOROVOD_RANK, ...), or Unset. Not implemented
	// yet: the runtime takes its placement from the communicator (MPI, or
	// the one given to Init) and ignores these; setting one logs a warning
	// at Init.
	Rank, Size           int
	LocalRank, LocalSize int
	CrossRank, CrossSize int
	// Hostname is the host name such a launcher assigned this worker to, or
	// empty. Under MPI (and over WithCommunicator), when set, it names this
	// rank's node: the local communicator groups the ranks with the same
	// Hostname instead of those that share memory, so that the ranks of one
	// machine can form several nodes (to try hierarchical collectives, for
	// example: mpirun -np 2 env HOROVOD_HOSTNAME=a prog : -np 2 env
	// HOROVOD_HOSTNAME=b prog). Every rank must then set it. HOROVOD_HOSTNAME.
	Hostname string
	// Launcher identifies the launcher process that started this worker,
	// in internal/procid's "PID:START:BOOT:NS" form, or is empty. The
	// runtime watches that process where it runs on the same host (and in
	// the same pid namespace) and exits the worker when it is gone.
	// GOHOROVOD_LAUNCHER.
	Launcher string

	// The embedded transport (see Gloo and docs/EMBEDDED.md).

	// Controller chooses the transport: ControllerMPI, ControllerGloo, or
	// empty (Gloo when RendezvousAddr is set, else MPI). HOROVOD_CONTROLLER,
	// read case-insensitively.
	Controller string
	// CPUOperations is Horovod's choice of the library for host tensors:
	// ControllerMPI, ControllerGloo or empty. Under MPI, ControllerGloo
	// carries them over the embedded transport's TCP ring while MPI
	// places the ranks and keeps the per-cycle agreement, ControllerMPI
	// keeps them on MPI, and empty keeps MPI on one node and, across
	// nodes, measures both at Init and keeps the faster (rank 0 logs the
	// times). On the embedded transport it has no effect (gohorovodrun
	// --gloo sets it with Controller, as horovodrun does).
	// HOROVOD_CPU_OPERATIONS.
	CPUOperations string
	// RendezvousAddr and RendezvousPort locate the job's rendezvous server
	// (the launcher's address and port). HOROVOD_GLOO_RENDEZVOUS_ADDR and
	// HOROVOD_GLOO_RENDEZVOUS_PORT; both or neither. Port 0 is unset.
	RendezvousAddr string
	RendezvousPort int
	// GlooTimeout bounds the rendezvous: the launcher ends the job, and a
	// worker gives up, naming the slots that never arrived.
	// HOROVOD_GLOO_TIMEOUT_SECONDS, in (possibly fractional) seconds.
	GlooTimeout time.Duration
	// AgreementSleepMax is the longest sleep between the tests of the
	// per-cycle agreement allreduce over MPI: the background loop waits
	// for the other ranks there with MPI_Iallreduce and MPI_Test, spinning
	// briefly and then sleeping, each sleep twice the last up to this,
	// instead of spinning in a blocking MPI_Allreduce while a peer still
	// computes. 0 keeps the blocking call. GOHOROVOD_AGREEMENT_SLEEP_MAX,
	// in (possibly fractional) microseconds.
	AgreementSleepMax time.Duration
	// AgreementDoorbell makes the patient waits over MPI sleep on the
	// node's doorbell while a rank on the same node has not yet joined
	// the collective: a page of shared memory in which every rank
	// records its arrival and wakes the sleepers (a futex), so that the
	// first rank spends no CPU while its peers compute and is woken when
	// the last of them arrives instead of one of its sleeps later
	// (mpi.Comm.EnableDoorbell). Where a rank cannot set it up, the waits
	// keep their timers. Only with AgreementSleepMax above 0.
	// GOHOROVOD_AGREEMENT_DOORBELL.
	AgreementDoorbell bool
	// StaticSchedule is how many rounds in a row of the same cached
	// responses, performed in the same order, make the background loop
	// lock a static schedule: it then skips the per-cycle agreement and
	// performs each unit of the schedule as soon as its tensors are
	// queued, after one small header collective that detects a rank that
	// has diverged, on which every rank goes back to negotiation
	// (runtime/internal/schedule). 0 never locks. GOHOROVOD_STATIC_SCHEDULE.
	StaticSchedule int
	// EmbeddedAllgather and EmbeddedAllreduce force the embedded
	// transport's allgather and allreduce algorithms: empty (the default)
	// or AlgoAuto chooses by size; an allgather can be forced to
	// "direct", "bruck" or "ring", an allreduce to "doubling" or "ring".
	// GOHOROVOD_EMBEDDED_ALLGATHER and GOHOROVOD_EMBEDDED_ALLREDUCE,
	// read case-insensitively.
	EmbeddedAllgather, EmbeddedAllreduce string
	// GlooIface names the network interface whose address the worker's
	// transport listens on and publishes to its peers. HOROVOD_GLOO_IFACE.
	GlooIface string
	// GlooAddr is the address (IP or host name) to listen on and publish,
	// where an interface name does not do; it wins over GlooIface.
	// Neither set: the address this host uses to reach the rendezvous
	// server (127.0.0.1 for a job on one machine). GOHOROVOD_GLOO_ADDR.
	GlooAddr string
	// GlooSocketDir is the directory for this worker's Unix sockets, made
	// by the launcher for the job: only its user may enter it, and its
	// name is not predictable. "": the worker makes a directory of its own
	// like it, under $XDG_RUNTIME_DIR or $TMPDIR, and removes it when it
	// ends. GOHOROVOD_GLOO_SOCKET_DIR.
	GlooSocketDir string
	// Secret is the job's key, hex. GOHOROVOD_SECRET.
	Secret Secret
	// Elastic says that an elastic launcher (gohorovodrun with
	// --min-np, --max-np or --host-discovery-script) started this worker:
	// the rendezvous then gives its rank and size, which may change while
	// it runs (optim/elastic). HOROVOD_ELASTIC=1.
	Elastic bool
}

// Gloo reports whether c selects the embedded transport: Controller is
// ControllerGloo, or Controller is empty and RendezvousAddr is set.
func (c Config) Gloo() bool {
	return c.Controller == ControllerGloo || c.Controller == "" && c.RendezvousAddr != ""
}

// RendezvousAddress is "addr:port" of the rendezvous server, or "" when
// RendezvousAddr is not set.
func (c Config) RendezvousAddress() string {
	if c.RendezvousAddr == "" {
		return ""
	}
	return net.JoinHostPort(c.RendezvousAddr, strconv.Itoa(c.RendezvousPort))
}

// Default returns the configuration used when the environment sets nothing.
func Default() Config {
	return Config{
		FusionThreshold:        DefaultFusionThreshold,
		CycleTime:              DefaultCycleTime,
		CacheCapacity:          DefaultCacheCapacity,
		StallCheckTime:         DefaultStallCheckTime,
		StallShutdownTime:      DefaultStallShutdownTime,
		HeartbeatTimeout:       DefaultHeartbeatTimeout,
		LogLevel:               DefaultLogLevel,
		AutotuneWarmupSamples:  DefaultAutotuneWarmupSamples,
		AutotuneStepsPerSample: DefaultAutotuneStepsPerSample,
		AutotuneMaxSamples:     DefaultAutotuneMaxSamples,
		AutotuneNoise:          DefaultAutotuneNoise,
		GlooTimeout:            DefaultGlooTimeout,
		AgreementSleepMax:      DefaultAgreementSleepMax,
		StaticSchedule:         DefaultStaticSchedule,
		AgreementDoorbell:      true,
		Rank:                   Unset,
		Size:                   Unset,
		LocalRank:              Unset,
		LocalSize:              Unset,
		CrossRank:              Unset,
		CrossSize:              Unset,
	}
}

// EnvError reports an environment variable whose value is malformed or out
// of range.
type EnvError struct {
	Var   string // the variable, e.g. HOROVOD_CYCLE_TIME
	Value string // its value as given
	Err   error  // what is wrong with it
}

// Error implements the error interface.
func (e *EnvError) Error() string {
	return fmt.Sprintf("config: %s=%q: %v", e.Var, e.Value, e.Err)
}

// Unwrap returns the underlying error, for errors.Is and errors.As.
func (e *EnvError) Unwrap() error { return e.Err }

// ErrNegative is wrapped by the errors for knobs given a negative value.
var ErrNegative = errors.New("must be >= 0")

// FromEnv reads every knob from lookup (os.LookupEnv, or Lookup over a
// "KEY=value" list), starting from Default. A variable that is absent or set
// to the empty string keeps its default. A malformed or out-of-range value is
// an *EnvError naming the variable and the value; the result is validated.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	c := Default()
	for _, k := range knobs {
		v, ok := lookup(k.env)
		if !ok || v == "" {
			continue
		}
		if err := k.parse(&c, v); err != nil {
			return Default(), &EnvError{Var: k.env, Value: v, Err: err}
		}
	}
	for _, p := range placement {
		v, ok := lookup(p.env)
		if !ok || v == "" {
			continue
		}
		if err := p.parse(&c, v); err != nil {
			if p.env == EnvSecret {
				v = Secret(v).String() // never in an error message
			}
			return Default(), &EnvError{Var: p.env, Value: v, Err: err}
		}
	}
	if err := c.Validate(); err != nil {
		return Default(), err
	}
	return c, nil
}

// Environ returns the configuration as "KEY=value" strings: every knob,
// always (so that a worker's environment says everything and inherits
// nothing by accident), followed by the placement variables that are set
// (not Unset, not empty). The order is fixed. FromEnv(Lookup(c.Environ()))
// returns c for every c that passes Validate.
func (c Config) Environ() []string {
	out := make([]string, 0, len(knobs)+len(placement))
	for _, k := range knobs {
		out = append(out, k.env+"="+k.format(&c))
	}
	for _, p := range placement {
		if v := p.format(&c); v != "" {
			out = append(out, p.env+"="+v)
		}
	}
	return out
}

// Names returns every variable this package reads, in Environ's order. A
// launcher removes these from the environment it passes on before adding
// Environ's list.
func Names() []string {
	out := make([]string, 0, len(knobs)+len(placement))
	for _, k := range knobs {
		out = append(out, k.env)
	}
	for _, p := range placement {
		out = append(out, p.env)
	}
	return out
}

// Lookup returns a lookup function over a list of "KEY=value" strings (such
// as os.Environ() or Environ's result), for FromEnv. A later entry for the
// same key wins, as in exec.Cmd.Env.
func Lookup(environ []string) func(string) (string, bool) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			m[k] = v
		}
	}
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// Validate reports the first knob whose value is out of range, as an
// *EnvError naming the variable that carries it.
func (c Config) Validate() error {
	bad := func(env, value string, err error) error {
		return &EnvError{Var: env, Value: value, Err: err}
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	switch {
	case c.FusionThreshold < 0:
		return bad(EnvFusionThreshold, i64(c.FusionThreshold), ErrNegative)
	case c.CycleTime < 0:
		return bad(EnvCycleTime, formatDuration(c.CycleTime, time.Millisecond), ErrNegative)
	case c.CacheCapacity < 0:
		return bad(EnvCacheCapacity, strconv.Itoa(c.CacheCapacity), ErrNegative)
	case c.StallCheckTime < 0:
		return bad(EnvStallCheckTime, formatDuration(c.StallCheckTime, time.Second), ErrNegative)
	case c.StallShutdownTime < 0:
		return bad(EnvStallShutdownTime, formatDuration(c.StallShutdownTime, time.Second), ErrNegative)
	case c.HeartbeatTimeout < 0:
		return bad(EnvHeartbeatTimeout, formatDuration(c.HeartbeatTimeout, time.Second), ErrNegative)
	case !c.LogLevel.valid():
		return bad(EnvLogLevel, strconv.Itoa(int(c.LogLevel)), errBadLevel)
	case c.AutotuneWarmupSamples < 0:
		return bad(EnvAutotuneWarmupSamples, strconv.Itoa(c.AutotuneWarmupSamples), ErrNegative)
	case c.AutotuneStepsPerSample < 0:
		return bad(EnvAutotuneStepsPerSample, strconv.Itoa(c.AutotuneStepsPerSample), ErrNegative)
	case c.AutotuneMaxSamples < 0:
		return bad(EnvAutotuneMaxSamples, strconv.Itoa(c.AutotuneMaxSamples), ErrNegative)
	case math.IsNaN(c.AutotuneNoise) || c.AutotuneNoise < 0 || c.AutotuneNoise > 1:
		return bad(EnvAutotuneNoise, formatFloat(c.AutotuneNoise), errors.New("must be in [0, 1]"))
	case c.GlooTimeout < 0:
		return bad(EnvGlooTimeout, formatDuration(c.GlooTimeout, time.Second), ErrNegative)
	case c.AgreementSleepMax < 0:
		return bad(EnvAgreementSleepMax, formatDuration(c.AgreementSleepMax, time.Microsecond), ErrNegative)
	case c.StaticSchedule < 0:
		return bad(EnvStaticSchedule, strconv.Itoa(c.StaticSchedule), ErrNegative)
	case !validController(c.Controller):
		return bad(EnvController, c.Controller, errBadController)
	case !validController(c.CPUOperations):
		return bad(EnvCPUOperations, c.CPUOperations, errBadController)
	case c.RendezvousPort < 0 || c.RendezvousPort > 65535:
		return bad(EnvRendezvousPort, strconv.Itoa(c.RendezvousPort), errBadPort)
	case c.RendezvousAddr != "" && c.RendezvousPort == 0:
		return bad(EnvRendezvousPort, "", fmt.Errorf("must be set with %s=%s", EnvRendezvousAddr, c.RendezvousAddr))
	case c.RendezvousAddr == "" && c.RendezvousPort != 0:
		return bad(EnvRendezvousAddr, "", fmt.Errorf("must be set with %s=%d", EnvRendezvousPort, c.RendezvousPort))
	case c.Secret != "":
		if _, err := c.Secret.Bytes(); err != nil {
			return bad(EnvSecret, c.Secret.String(), err)
		}
	}
	pairs := []struct {
		rankEnv, sizeEnv string
		rank, size       int
	}{
		{EnvRank, EnvSize, c.Rank, c.Size},
		{EnvLocalRank, EnvLocalSize, c.LocalRank, c.LocalSize},
		{EnvCrossRank, EnvCrossSize, c.CrossRank, c.CrossSize},
	}
	for _, p := range pairs {
		if p.rank < Unset {
			return bad(p.rankEnv, strconv.Itoa(p.rank), ErrNegative)
		}
		if p.size < Unset || p.size == 0 {
			return bad(p.sizeEnv, strconv.Itoa(p.size), errors.New("must be >= 1"))
		}
		if p.rank != Unset && p.size != Unset && p.rank >= p.size {
			return bad(p.rankEnv, strconv.Itoa(p.rank), fmt.Errorf("must be less than %s=%d", p.sizeEnv, p.size))
		}
	}
	return c.validateAlgos()
}

var (
	errBadController = errors.New(`must be "mpi" or "gloo"`)
	errBadPort       = errors.New("not a port number (1 to 65535)")
)

func validController(s string) bool { return s == "" || s == ControllerMPI || s == ControllerGloo }

// knob ties one Config field to its variable.
type knob struct {
	env    string
	format func(c *Config) string
	parse  func(c *Config, s string) error
}

var knobs = []knob{
	{EnvFusionThreshold,
		func(c *Config) string { return strconv.FormatInt(c.FusionThreshold, 10) },
		func(c *Config, s string) (err error) {
			c.FusionThreshold, err = parseInt64(s, "a whole number of bytes")
			return
		}},
	{EnvCycleTime,
		func(c *Config) string { return formatDuration(c.CycleTime, time.Millisecond) },
		func(c *Config, s string) (err error) {
			c.CycleTime, err = parseDuration(s, time.Millisecond, "a number of milliseconds")
			return
		}},
	{EnvCacheCapacity,
		func(c *Config) string { return strconv.Itoa(c.CacheCapacity) },
		func(c *Config, s string) (err error) {
			c.CacheCapacity, err = parseInt(s, "a whole number of entries")
			return
		}},
	{EnvTimeline,
		func(c *Config) string { return c.Timeline },
		func(c *Config, s string) error { c.Timeline = s; return nil }},
	{EnvTimelineMarkCycles,
		func(c *Config) string { return formatBool(c.TimelineMarkCycles) },
		func(c *Config, s string) (err error) { c.TimelineMarkCycles, err = parseBool(s); return }},
	{EnvStallCheckDisable,
		func(c *Config) string { return formatBool(c.StallCheckDisable) },
		func(c *Config, s string) (err error) { c.StallCheckDisable, err = parseBool(s); return }},
	{EnvStallCheckTime,
		func(c *Config) string { return formatDuration(c.StallCheckTime, time.Second) },
		func(c *Config, s string) (err error) {
			c.StallCheckTime, err = parseDuration(s, time.Second, "a number of seconds")
			return
		}},
	{EnvStallShutdownTime,
		func(c *Config) string { return formatDuration(c.StallShutdownTime, time.Second) },
		func(c *Config, s string) (err error) {
			c.StallShutdownTime, err = parseDuration(s, time.Second, "a number of seconds")
			return
		}},
	{EnvHeartbeatTimeout,
		func(c *Config) string { return formatDuration(c.HeartbeatTimeout, time.Second) },
		func(c *Config, s string) (err error) {
			c.HeartbeatTimeout, err = parseDuration(s, time.Second, "a number of seconds")
			return
		}},
	{EnvLogLevel,
		func(c *Config) string { return c.LogLevel.String() },
		func(c *Config, s string) (err error) { c.LogLevel, err = ParseLogLevel(s); return }},
	{EnvLogHideTime,
		func(c *Config) string { return formatBool(c.LogHideTime) },
		func(c *Config, s string) (err error) { c.LogHideTime, err = parseBool(s); return }},
	{EnvHierarchicalAllreduce,
		func(c *Config) string { return formatBool(c.HierarchicalAllreduce) },
		func(c *Config, s string) (err error) { c.HierarchicalAllreduce, err = parseBool(s); return }},
	{EnvHierarchicalAllgather,
		func(c *Config) string { return formatBool(c.HierarchicalAllgather) },
		func(c *Config, s string) (err error) { c.HierarchicalAllgather, err = parseBool(s); return }},
	{EnvDynamicProcessSets,
		func(c *Config) string { return formatBool(c.DynamicProcessSets) },
		func(c *Config, s string) (err error) { c.DynamicProcessSets, err = parseBool(s); return }},
	{EnvMPIThreadsDisable,
		func(c *Config) string { return formatBool(c.MPIThreadsDisable) },
		func(c *Config, s string) (err error) { c.MPIThreadsDisable, err = parseBool(s); return }},
	{EnvAutotune,
		func(c *Config) string { return formatBool(c.Autotune) },
		func(c *Config, s string) (err error) { c.Autotune, err = parseBool(s); return }},
	{EnvAutotuneLog,
		func(c *Config) string { return c.AutotuneLog },
		func(c *Config, s string) error { c.AutotuneLog = s; return nil }},
	{EnvAutotuneWarmupSamples,
		func(c *Config) string { return strconv.Itoa(c.AutotuneWarmupSamples) },
		func(c *Config, s string) (err error) {
			c.AutotuneWarmupSamples, err = parseInt(s, "a whole number")
			return
		}},
	{EnvAutotuneStepsPerSample,
		func(c *Config) string { return strconv.Itoa(c.AutotuneStepsPerSample) },
		func(c *Config, s string) (err error) {
			c.AutotuneStepsPerSample, err = parseInt(s, "a whole number")
			return
		}},
	{EnvAutotuneMaxSamples,
		func(c *Config) string { return strconv.Itoa(c.AutotuneMaxSamples) },
		func(c *Config, s string) (err error) {
			c.AutotuneMaxSamples, err = parseInt(s, "a whole number")
			return
		}},
	{EnvAutotuneNoise,
		func(c *Config) string { return formatFloat(c.AutotuneNoise) },
		func(c *Config, s string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil {
				return errors.New("not a number")
			}
			c.AutotuneNoise = f
			return nil
		}},
	{EnvGlooTimeout,
		func(c *Config) string { return formatDuration(c.GlooTimeout, time.Second) },
		func(c *Config, s string) (err error) {
			c.GlooTimeout, err = parseDuration(s, time.Second, "a number of seconds")
			return
		}},
	{EnvAgreementSleepMax,
		func(c *Config) string { return formatDuration(c.AgreementSleepMax, time.Microsecond) },
		func(c *Config, s string) (err error) {
			c.AgreementSleepMax, err = parseDuration(s, time.Microsecond, "a number of microseconds")
			return
		}},
	{EnvAgreementDoorbell,
		func(c *Config) string { return formatBool(c.AgreementDoorbell) },
		func(c *Config, s string) (err error) { c.AgreementDoorbell, err = parseBool(s); return }},
	{EnvStaticSchedule,
		func(c *Config) string { return strconv.Itoa(c.StaticSchedule) },
		func(c *Config, s string) (err error) {
			c.StaticSchedule, err = parseInt(s, "a whole number of rounds")
			return
		}},
	algoKnob(EnvEmbeddedAllgather, allgatherAlgos, func(c *Config) *string { return &c.EmbeddedAllgather }),
	algoKnob(EnvEmbeddedAllreduce, allreduceAlgos, func(c *Config) *string { return &c.EmbeddedAllreduce }),
}

// placement (and the job's other per-worker variables): written by Environ
// only when set.
var placement = []knob{
	placementInt(EnvRank, func(c *Config) *int { return &c.Rank }),
	placementInt(EnvSize, func(c *Config) *int { return &c.Size }),
	placementInt(EnvLocalRank, func(c *Config) *int { return &c.LocalRank }),
	placementInt(EnvLocalSize, func(c *Config) *int { return &c.LocalSize }),
	placementInt(EnvCrossRank, func(c *Config) *int { return &c.CrossRank }),
	placementInt(EnvCrossSize, func(c *Config) *int { return &c.CrossSize }),
	{EnvHostname,
		func(c *Config) string { return c.Hostname },
		func(c *Config, s string) error { c.Hostname = s; return nil }},
	{EnvLauncher,
		func(c *Config) string { return c.Launcher },
		func(c *Config, s string) error { c.Launcher = s; return nil }},
	controllerKnob(EnvController, func(c *Config) *string { return &c.Controller }),
	controllerKnob(EnvCPUOperations, func(c *Config) *string { return &c.CPUOperations }),
	{EnvRendezvousAddr,
		func(c *Config) string { return c.RendezvousAddr },
		func(c *Config, s string) error { c.RendezvousAddr = s; return nil }},
	{EnvRendezvousPort,
		func(c *Config) string {
			if c.RendezvousPort == 0 {
				return ""
			}
			return strconv.Itoa(c.RendezvousPort)
		},
		func(c *Config, s string) error {
			v, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || v < 1 || v > 65535 {
				return errBadPort
			}
			c.RendezvousPort = v
			return nil
		}},
	{EnvGlooIface,
		func(c *Config) string { return c.GlooIface },
		func(c *Config, s string) error { c.GlooIface = s; return nil }},
	{EnvGlooAddr,
		func(c *Config) string { return c.GlooAddr },
		func(c *Config, s string) error { c.GlooAddr = s; return nil }},
	{EnvGlooSocketDir,
		func(c *Config) string { return c.GlooSocketDir },
		func(c *Config, s string) error { c.GlooSocketDir = s; return nil }},
	{EnvElastic,
		func(c *Config) string {
			if c.Elastic {
				return "1"
			}
			return ""
		},
		func(c *Config, s string) error {
			v, err := parseBool(s)
			c.Elastic = v
			return err
		}},
	{EnvSecret,
		func(c *Config) string { return string(c.Secret) },
		func(c *Config, s string) error {
			c.Secret = Secret(strings.TrimSpace(s))
			if _, err := c.Secret.Bytes(); err != nil {
				c.Secret = ""
				return err
			}
			return nil
		}},
}

// controllerKnob reads "mpi" or "gloo", in any case.
func controllerKnob(env string, field func(*Config) *string) knob {
	return knob{env,
		func(c *Config) string { return *field(c) },
		func(c *Config, s string) error {
			v := strings.ToLower(strings.TrimSpace(s))
			if !validController(v) {
				return errBadController
			}
			*field(c) = v
			return nil
		}}
}

func placementInt(env string, field func(*Config) *int) knob {
	return knob{env,
		func(c *Config) string {
			if v := *field(c); v != Unset {
				return strconv.Itoa(v)
			}
			return ""
		},
		func(c *Config, s string) error {
			v, err := parseInt(s, "a whole number")
			if err == nil && v < 0 {
				err = ErrNegative
			}
			*field(c) = v
			return err
		}}
}

func parseInt64(s, what string) (int64, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not %s", what)
	}
	if v < 0 {
		return 0, ErrNegative
	}
	return v, nil
}

func parseInt(s, what string) (int, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseInt(s, 10, strconv.IntSize)
	if err != nil {
		return 0, fmt.Errorf("not %s", what)
	}
	if v < 0 {
		return 0, ErrNegative
	}
	return int(v), nil
}

// parseBool accepts what strconv.ParseBool accepts, plus any integer
// (non-zero is true), as Horovod's getenv-and-atoi does.
func parseBool(s string) (bool, error) {
	s = strings.TrimSpace(s)
	if b, err := strconv.ParseBool(s); err == nil {
		return b, nil
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v != 0, nil
	}
	return false, errors.New("not a boolean (use 1 or 0)")
}

func formatBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// formatDuration writes d as an exact decimal number of units (at most nine
// fractional digits, trailing zeros dropped): 1500µs in milliseconds is "1.5".
func formatDuration(d, unit time.Duration) string {
	neg := d < 0
	u := uint64(d)
	if neg {
		u = -u
	}
	whole, frac := u/uint64(unit), u%uint64(unit)
	s := strconv.FormatUint(whole, 10)
	if frac != 0 {
		digits := len(strconv.FormatUint(uint64(unit), 10)) - 1
		f := fmt.Sprintf("%0*d", digits, frac)
		s += "." + strings.TrimRight(f, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// parseDuration reads a decimal (or exponent-form) number of units. Plain
// decimals are converted exactly; exponent forms go through float64 and are
// rounded to the nearest nanosecond.
func parseDuration(s string, unit time.Duration, what string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, ok := parseDecimal(s, unit); ok {
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("not %s", what)
	}
	if f < 0 {
		return 0, ErrNegative
	}
	ns := math.Round(f * float64(unit))
	if ns >= math.MaxInt64 {
		return 0, errors.New("too large")
	}
	return time.Duration(ns), nil
}

// parseDecimal converts "123", "1.5", ".25" or "2." (a number of units)
// exactly; fractional digits below a nanosecond must be zero.
func parseDecimal(s string, unit time.Duration) (time.Duration, bool) {
	s = strings.TrimPrefix(s, "+")
	intPart, fracPart, _ := strings.Cut(s, ".")
	if intPart == "" && fracPart == "" {
		return 0, false
	}
	for _, r := range intPart + fracPart {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	var whole uint64
	if intPart != "" {
		w, err := strconv.ParseUint(intPart, 10, 64)
		if err != nil {
			return 0, false
		}
		whole = w
	}
	digits := len(strconv.FormatUint(uint64(unit), 10)) - 1
	if len(fracPart) > digits {
		if strings.Trim(fracPart[digits:], "0") != "" {
			return 0, false // finer than a nanosecond: the float path rounds it
		}
		fracPart = fracPart[:digits]
	}
	var frac uint64
	if fracPart != "" {
		f, _ := strconv.ParseUint(fracPart, 10, 64)
		for i := len(fracPart); i < digits; i++ {
			f *= 10
		}
		frac = f
	}
	if whole > (math.MaxInt64-frac)/uint64(unit) {
		return 0, false
	}
	return time.Duration(whole*uint64(unit) + frac), true
}
