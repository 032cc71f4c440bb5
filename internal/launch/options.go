package launch

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/internal/launch/elastic"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// EnvStartTimeout is the launcher's own variable: the default for
// --start-timeout, in seconds, as in horovodrun.
const EnvStartTimeout = "HOROVOD_START_TIMEOUT"

// DefaultStartTimeout bounds the checks before launch (ssh reachability,
// mpirun --version) when neither --start-timeout nor HOROVOD_START_TIMEOUT
// says otherwise.
const DefaultStartTimeout = 30 * time.Second

// EnvElasticTimeout is the launcher's own variable: the default for
// --elastic-timeout, in seconds, as in horovodrun (elastic mode only; the
// default without it is elastic.DefaultElasticTimeout, 600 seconds).
const EnvElasticTimeout = "HOROVOD_ELASTIC_TIMEOUT"

// Options is the parsed command line.
type Options struct {
	NP       int
	Hosts    string
	Hostfile string
	MPIArgs  string
	// SingleCopy is --mpi-single-copy: none, cma or auto.
	SingleCopy     string
	OutputFilename string
	Verbose        bool
	DryRun         bool
	CheckBuild     bool
	Version        bool
	SSHPort        int
	SSHIdentity    string
	NICs           []string
	StartTimeout   float64 // seconds; 0 means the default
	// PreemptGrace is how long, in seconds, the workers have to stop
	// after a stop signal (--preempt-grace); 0: Launcher.PreemptGrace.
	PreemptGrace float64
	// Gloo selects the embedded transport (--gloo), MPI forces mpirun
	// (--mpi); neither: mpirun when it is on PATH, else the embedded one.
	Gloo, MPI bool
	// GlooTimeoutSeconds bounds the rendezvous (--gloo-timeout-seconds).
	GlooTimeoutSeconds float64

	// The knobs, in horovodrun's units.
	FusionThresholdMB       float64
	CycleTimeMS             float64
	CacheCapacity           int
	TimelineFilename        string
	TimelineMarkCycles      bool
	NoStallCheck            bool
	StallWarningSeconds     float64
	StallShutdownSeconds    float64
	HeartbeatTimeoutSeconds float64
	LogLevel                string
	LogWithoutTimestamp     bool
	MPIThreadsDisable       bool
	HierarchicalAllreduce   bool
	HierarchicalAllgather   bool
	Autotune                bool
	AutotuneLogFile         string
	// horovodrun's other autotune flags (HOROVOD_AUTOTUNE_*).
	AutotuneWarmupSamples  int
	AutotuneStepsPerSample int
	AutotuneMaxSamples     int
	AutotuneNoise          float64

	// Elastic mode (see Elastic): horovodrun's elastic flags.
	MinNP               int    // --min-np; 0 (not given) means NP
	MaxNP               int    // --max-np; 0 (not given) means no cap
	HostDiscoveryScript string // --host-discovery-script
	SlotsPerHost        int    // --slots-per-host: slots of a bare host the script prints
	// ElasticTimeout is --elastic-timeout, in seconds; 0 (not given) means
	// $HOROVOD_ELASTIC_TIMEOUT, else 600 (see ElasticConfig).
	ElasticTimeout float64
	ResetLimit     int // --reset-limit; 0 means no limit
	// BlacklistCooldownRange is --blacklist-cooldown-range MIN MAX, in
	// seconds; both zero (not given) blacklist a failed host for good.
	BlacklistCooldownRange [2]float64

	// Multi-node launch without ssh, torchrun's way (see NodesFrom): one
	// launcher per node, each given --nnodes, --node-rank and the master.
	NNodes         string // --nnodes: N (or MIN:MAX, refused: not elastic)
	NodeRank       int    // --node-rank
	NProcPerNode   int    // --nproc-per-node
	MasterAddr     string // --master-addr
	MasterPort     int    // --master-port
	InsecureSecret bool   // --insecure-secret: derive the secret from the master's address

	// Command is the worker program and its arguments.
	Command []string

	set map[string]bool // flags given on the command line
}

// IsSet reports whether the flag named (long name) was given.
func (o *Options) IsSet(name string) bool { return o.set[name] }

// singleDash maps horovodrun's single-dash long flags to their pflag names.
var singleDash = map[string]string{
	"-np":                  "--num-proc",
	"-cb":                  "--check-build",
	"-hostfile":            "--hostfile",
	"-prefix-timestamp":    "--prefix-timestamp",
	"--np":                 "--num-proc",
	"--network-interfaces": "--network-interface",
}

// cooldownFlag is the name of --blacklist-cooldown-range, whose horovodrun
// form takes two arguments (normalize).
const cooldownFlag = "blacklist-cooldown-range"

// cooldownValue is the pflag.Value of --blacklist-cooldown-range: two
// numbers of seconds, MIN,MAX (normalize rewrites horovodrun's MIN MAX).
type cooldownValue struct{ r *[2]float64 }

func (v cooldownValue) String() string {
	if v.r[0] == 0 && v.r[1] == 0 {
		return ""
	}
	return strconv.FormatFloat(v.r[0], 'g', -1, 64) + "," + strconv.FormatFloat(v.r[1], 'g', -1, 64)
}

func (v cooldownValue) Set(s string) error {
	lo, hi, ok := strings.Cut(s, ",")
	if ok {
		a, errA := strconv.ParseFloat(strings.TrimSpace(lo), 64)
		b, errB := strconv.ParseFloat(strings.TrimSpace(hi), 64)
		if errA == nil && errB == nil {
			v.r[0], v.r[1] = a, b
			return nil
		}
	}
	return errors.New("want MIN MAX, two numbers of seconds, e.g. --blacklist-cooldown-range 10 100 (or =10,100)")
}

func (v cooldownValue) Type() string { return "range" }

func newFlagSet(o *Options, out io.Writer) *pflag.FlagSet {
	d := config.Default()
	fs := pflag.NewFlagSet("gohorovodrun", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.SetInterspersed(false) // everything after the program is the program's
	fs.SortFlags = false
	fs.IntVar(&o.NP, "num-proc", 0, "`N` processes in all (also -np N)")
	fs.StringVarP(&o.Hosts, "hosts", "H", "", "comma-separated `HOSTS`, each host:slots, e.g. h1:4,h2:4 (default localhost:N, or the SLURM allocation)")
	fs.StringVar(&o.Hostfile, "hostfile", "", "read the hosts from `FILE`, one line per host: host slots=N (not with -H)")
	fs.IntVarP(&o.SSHPort, "ssh-port", "p", 0, "ssh `PORT` on the remote hosts (default ssh's own)")
	fs.StringVarP(&o.SSHIdentity, "ssh-identity-file", "i", "", "ssh identity (private key) `FILE`")
	fs.StringSliceVar(&o.NICs, "network-interface", nil, "network interface `NAME` for MPI and NCCL traffic (repeat the flag, or give NAME,NAME)")
	fs.Float64Var(&o.StartTimeout, "start-timeout", 0, "`SECONDS` allowed for the checks before launch (default $HOROVOD_START_TIMEOUT or 30)")
	fs.Float64Var(&o.PreemptGrace, "preempt-grace", 0, "`SECONDS` the workers have, after SIGTERM, SIGUSR1 or SIGINT is passed on to them, to stop at a step boundary before they are stopped (default 30; at least the workers' own grace)")
	fs.BoolVar(&o.Gloo, "gloo", false, "run the workers on the embedded transport, without MPI (the default when mpirun is not on PATH)")
	fs.BoolVar(&o.MPI, "mpi", false, "run the workers under mpirun (the default when it is on PATH)")
	fs.Float64Var(&o.GlooTimeoutSeconds, "gloo-timeout-seconds", d.GlooTimeout.Seconds(), "with --gloo: end the job when the workers have not all met `SECONDS` after the start")
	fs.StringVar(&o.MPIArgs, "mpi-args", "", "extra mpirun `ARGS`, e.g. --mpi-args=\"--mca btl self,vader\"")
	fs.StringVar(&o.SingleCopy, "mpi-single-copy", "auto", "Open MPI's single-copy mechanism between the ranks of one host: `auto` (cross-memory attach where a probe finds it works, else none), cma (cross-memory attach; refused where the probe finds it does not work) or none (copy in and out through shared memory)")
	fs.StringVar(&o.OutputFilename, "output-filename", "", "write each rank's stdout and stderr under `DIR`")
	fs.BoolVar(&o.Verbose, "verbose", false, "print the checks and the mpirun command")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the mpirun command and environment, start nothing")
	fs.BoolVar(&o.CheckBuild, "check-build", false, "print what this build supports and exit (also -cb)")
	fs.BoolVarP(&o.Version, "version", "v", false, "print the version and exit")

	fs.Float64Var(&o.FusionThresholdMB, "fusion-threshold-mb", float64(d.FusionThreshold)/(1<<20), "fusion buffer size in `MiB` (0 disables fusion)")
	fs.Float64Var(&o.CycleTimeMS, "cycle-time-ms", float64(d.CycleTime)/float64(time.Millisecond), "run a background cycle every `MS` milliseconds")
	fs.IntVar(&o.CacheCapacity, "cache-capacity", d.CacheCapacity, "response cache of `N` entries (0 disables the cache)")
	fs.StringVar(&o.TimelineFilename, "timeline-filename", "", "rank 0 writes a Chrome-trace timeline to `FILE`")
	fs.BoolVar(&o.TimelineMarkCycles, "timeline-mark-cycles", false, "mark background cycles in the timeline")
	fs.BoolVar(&o.NoStallCheck, "no-stall-check", false, "disable the stall inspector")
	fs.Float64Var(&o.StallWarningSeconds, "stall-check-warning-time-seconds", d.StallCheckTime.Seconds(), "warn when ranks wait `SECONDS` for the others")
	fs.Float64Var(&o.StallShutdownSeconds, "stall-check-shutdown-time-seconds", d.StallShutdownTime.Seconds(), "shut the job down after a stall of `SECONDS` (0: never)")
	fs.Float64Var(&o.HeartbeatTimeoutSeconds, "heartbeat-timeout-seconds", d.HeartbeatTimeout.Seconds(), "declare a rank frozen after `SECONDS` without a heartbeat, and end the job (0: never)")
	fs.StringVar(&o.LogLevel, "log-level", d.LogLevel.String(), "workers' log `LEVEL`: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL")
	fs.BoolVar(&o.LogWithoutTimestamp, "log-without-timestamp", false, "leave timestamps out of log lines")
	fs.BoolVar(&o.MPIThreadsDisable, "mpi-threads-disable", false, "ask MPI for MPI_THREAD_SINGLE (not implemented yet: no effect)")
	fs.BoolVar(&o.HierarchicalAllreduce, "hierarchical-allreduce", false, "hierarchical allreduce: reduce-scatter within each host, allreduce across hosts, allgather within each host (HOROVOD_HIERARCHICAL_ALLREDUCE)")
	fs.BoolVar(&o.HierarchicalAllgather, "hierarchical-allgather", false, "hierarchical allgather: gather within each host, allgather across hosts, broadcast within each host (HOROVOD_HIERARCHICAL_ALLGATHER)")
	fs.BoolVar(&o.Autotune, "autotune", false, "tune fusion threshold, cycle time and the runtime's piece sizes while training (HOROVOD_AUTOTUNE)")
	fs.StringVar(&o.AutotuneLogFile, "autotune-log-file", "", "CSV `FILE` of the autotuning samples (HOROVOD_AUTOTUNE_LOG)")
	fs.IntVar(&o.AutotuneWarmupSamples, "autotune-warmup-samples", d.AutotuneWarmupSamples, "the first `N` autotuning scores are discarded (HOROVOD_AUTOTUNE_WARMUP_SAMPLES)")
	fs.IntVar(&o.AutotuneStepsPerSample, "autotune-steps-per-sample", d.AutotuneStepsPerSample, "`N` training steps make one autotuning sample (HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE)")
	fs.IntVar(&o.AutotuneMaxSamples, "autotune-bayes-opt-max-samples", d.AutotuneMaxSamples, "the Bayesian optimisation scores at most `N` settings (HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES)")
	fs.Float64Var(&o.AutotuneNoise, "autotune-gaussian-process-noise", d.AutotuneNoise, "the Gaussian process's `NOISE`, in [0, 1] (HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE)")

	fs.StringVar(&o.NNodes, "nnodes", "", "multi-node launch without ssh: this job has `N` nodes, each running one gohorovodrun, or MIN:MAX for an elastic job (default $PET_NNODES)")
	fs.IntVar(&o.NodeRank, "node-rank", 0, "with --nnodes: this node's rank `K`, 0 to N-1; node 0 hosts the meeting (default $PET_NODE_RANK, else 0)")
	fs.IntVar(&o.NProcPerNode, "nproc-per-node", 0, "with --nnodes: `P` workers on every node (default $PET_NPROC_PER_NODE, else 1)")
	fs.StringVar(&o.MasterAddr, "master-addr", "", "with --nnodes: the `HOST` of node 0, where the launchers meet (default $PET_MASTER_ADDR, else $MASTER_ADDR)")
	fs.IntVar(&o.MasterPort, "master-port", 0, "with --nnodes: the `PORT` node 0 listens on for the other launchers (default $PET_MASTER_PORT, else $MASTER_PORT, else 29500)")
	fs.BoolVar(&o.InsecureSecret, "insecure-secret", false, "with --nnodes > 1 and no GOHOROVOD_SECRET: derive the job secret from the master's address and port, which anyone who knows them can guess")
	fs.StringVar(&o.HostDiscoveryScript, "host-discovery-script", "", "elastic mode: executable `SCRIPT` printing the available hosts, one per line, host:slots or host (not with -H/--hostfile)")
	fs.IntVar(&o.MinNP, "min-np", 0, "elastic mode: keep training with no fewer than `N` processes, else wait for more (default -np)")
	fs.IntVar(&o.MaxNP, "max-np", 0, "elastic mode: grow to at most `N` processes as slots appear (default: no cap)")
	fs.IntVar(&o.SlotsPerHost, "slots-per-host", 0, "elastic mode: `N` slots for each host the discovery script prints without :slots")
	fs.Float64Var(&o.ElasticTimeout, "elastic-timeout", 0, "elastic mode: wait `SECONDS` for enough slots, or for discovery to recover (default $HOROVOD_ELASTIC_TIMEOUT or 600)")
	fs.IntVar(&o.ResetLimit, "reset-limit", 0, "elastic mode: end the job when it would reset more than `N` times (default 0: no limit)")
	fs.Var(cooldownValue{&o.BlacklistCooldownRange}, cooldownFlag, "elastic mode: readmit a failed host after a cooldown, in `MIN MAX` seconds: MIN, doubling with its failures, at most MAX (default: never; also =MIN,MAX)")
	return fs
}

// normalize rewrites horovodrun's single-dash long flags (-np 4, -np=4,
// -cb, -hostfile F) and its two-argument --blacklist-cooldown-range MIN MAX
// into pflag's form. It stops at the program: the program's own arguments
// are left as they are.
func normalize(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return append(out, args[i:]...)
		}
		name, val, hasVal := strings.Cut(a, "=")
		if long, ok := singleDash[name]; ok {
			name = long
			a = name
			if hasVal {
				a += "=" + val
			}
		}
		if name == "--"+cooldownFlag && !hasVal && i+1 < len(args) {
			// horovodrun's --blacklist-cooldown-range MIN MAX: two
			// arguments, made one pflag value MIN,MAX. The second is taken
			// only when it is a number, so that a missing MAX is reported
			// as such rather than eating the program.
			i++
			v := args[i]
			if !strings.Contains(v, ",") && i+1 < len(args) {
				if _, err := strconv.ParseFloat(args[i+1], 64); err == nil {
					i++
					v += "," + args[i]
				}
			}
			out = append(out, name+"="+v)
			continue
		}
		out = append(out, a)
		if hasVal {
			continue
		}
		// Does this flag take the next argument as its value?
		var f *pflag.Flag
		if strings.HasPrefix(name, "--") {
			f = fs.Lookup(name[2:])
		} else if len(name) == 2 {
			f = fs.ShorthandLookup(name[1:])
		}
		if f != nil && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// Parse reads the command line (without the program name). Help (-h)
// is printed to out and returned as pflag.ErrHelp.
func Parse(args []string, out io.Writer) (*Options, error) {
	o := &Options{set: map[string]bool{}}
	fs := newFlagSet(o, out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: gohorovodrun -np N [-H host:slots,...] [options] program [args...]\n\nOptions:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(normalize(fs, args)); err != nil {
		if err == pflag.ErrHelp {
			return nil, err
		}
		return nil, usagef("%v (see gohorovodrun --help)", err)
	}
	fs.Visit(func(f *pflag.Flag) { o.set[f.Name] = true })
	o.Command = fs.Args()
	return o, o.check()
}

// check refuses values that no run can use, naming the flag.
func (o *Options) check() error {
	if o.Version || o.CheckBuild {
		return nil
	}
	if o.set["num-proc"] && o.NP < 1 {
		return usagef("-np must be at least 1 (got %d)", o.NP)
	}
	nonNeg := []struct {
		name string
		v    float64
	}{
		{"fusion-threshold-mb", o.FusionThresholdMB},
		{"cycle-time-ms", o.CycleTimeMS},
		{"cache-capacity", float64(o.CacheCapacity)},
		{"stall-check-warning-time-seconds", o.StallWarningSeconds},
		{"stall-check-shutdown-time-seconds", o.StallShutdownSeconds},
		{"start-timeout", o.StartTimeout},
		{"preempt-grace", o.PreemptGrace},
		{"ssh-port", float64(o.SSHPort)},
		{"gloo-timeout-seconds", o.GlooTimeoutSeconds},
		{"min-np", float64(o.MinNP)},
		{"max-np", float64(o.MaxNP)},
		{"slots-per-host", float64(o.SlotsPerHost)},
		{"reset-limit", float64(o.ResetLimit)},
	}
	for _, f := range nonNeg {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return usagef("--%s=%v must be >= 0", f.name, f.v)
		}
	}
	if o.Gloo && o.MPI {
		return usagef("--gloo and --mpi both given: use one of them")
	}
	if o.Gloo && o.MPIArgs != "" {
		return usagef("--mpi-args has no effect with --gloo (the workers are not started by mpirun)")
	}
	if o.Hosts != "" && o.Hostfile != "" {
		return usagef("-H/--hosts and --hostfile both given: use one of them")
	}
	if _, err := config.ParseLogLevel(o.LogLevel); err != nil {
		return usagef("--log-level=%s: %v", o.LogLevel, err)
	}
	if err := o.checkElastic(); err != nil {
		return err
	}
	if len(o.Command) == 0 {
		return usagef("no program given: gohorovodrun -np 4 ./train [args...]")
	}
	return nil
}

// Elastic reports whether the job runs in elastic mode: as horovodrun
// decides, when --host-discovery-script, --min-np or --max-np was given.
// The hosts then come from the discovery script, or are the fixed -H or
// --hostfile hosts (Horovod's FixedHosts), and the job runs on the
// embedded transport.
func (o *Options) Elastic() bool {
	return o.set["host-discovery-script"] || o.set["min-np"] || o.set["max-np"]
}

// elasticOnly are the flags that mean something in elastic mode only.
var elasticOnly = []string{"slots-per-host", "reset-limit", "elastic-timeout", cooldownFlag}

// checkElastic refuses elastic flags that no elastic run can use, and
// elastic-mode flags outside elastic mode.
func (o *Options) checkElastic() error {
	if !o.Elastic() {
		for _, name := range elasticOnly {
			if o.set[name] {
				return usagef("--%s is an elastic-mode flag: it needs --host-discovery-script, --min-np or --max-np", name)
			}
		}
		return nil
	}
	if o.MPI {
		return usagef("--mpi with elastic mode (--host-discovery-script, --min-np or --max-np): elastic mode needs the embedded transport, " +
			"since mpirun cannot re-form a running job; drop --mpi (gohorovodrun then uses --gloo)")
	}
	if o.MPIArgs != "" {
		return usagef("--mpi-args has no effect in elastic mode (the workers are not started by mpirun)")
	}
	if o.set["host-discovery-script"] {
		switch {
		case o.HostDiscoveryScript == "":
			return usagef("--host-discovery-script needs a SCRIPT: the path of an executable that prints the available hosts")
		case o.Hosts != "":
			return usagef("--host-discovery-script and -H/--hosts both given: the script finds the hosts; use one of them")
		case o.Hostfile != "":
			return usagef("--host-discovery-script and --hostfile both given: the script finds the hosts; use one of them")
		}
	} else if o.set["slots-per-host"] {
		return usagef("--slots-per-host applies to the hosts --host-discovery-script prints: it has no effect without the script")
	}
	if !o.set["num-proc"] {
		return usagef("elastic mode needs -np N: the number of processes to start with (--min-np and --max-np bound it later)")
	}
	if o.set["min-np"] && o.MinNP == 0 {
		return usagef("--min-np must be at least 1")
	}
	if o.MinNP > o.NP {
		return usagef("--min-np %d is more than -np %d: the job starts with -np processes and goes on with no fewer than --min-np", o.MinNP, o.NP)
	}
	if o.set["max-np"] && o.MaxNP < o.NP {
		return usagef("--max-np %d is less than -np %d: the job starts with -np processes and grows to no more than --max-np", o.MaxNP, o.NP)
	}
	if o.set["slots-per-host"] && o.SlotsPerHost == 0 {
		return usagef("--slots-per-host must be at least 1")
	}
	if t := o.ElasticTimeout; o.set["elastic-timeout"] && !positiveSeconds(t) {
		return usagef("--elastic-timeout=%v must be a positive number of seconds", t)
	}
	if lo, hi := o.BlacklistCooldownRange[0], o.BlacklistCooldownRange[1]; o.set[cooldownFlag] && !(positiveSeconds(lo) && positiveSeconds(hi) && lo <= hi) {
		return usagef("--%s %v %v: want 0 < MIN <= MAX seconds", cooldownFlag, lo, hi)
	}
	return nil
}

// positiveSeconds reports whether s seconds is a positive time.Duration:
// not NaN, not so small that it rounds to 0, not so large that it
// overflows.
func positiveSeconds(s float64) bool {
	return s > 0 && s < float64(math.MaxInt64)/float64(time.Second) && seconds(s) > 0
}

// ElasticConfig is the elastic driver's configuration from the elastic
// flags (meaningful in elastic mode, see Elastic). The elastic timeout is
// --elastic-timeout, else $HOROVOD_ELASTIC_TIMEOUT from environ (the
// launcher's environment), else elastic.DefaultElasticTimeout; a malformed
// HOROVOD_ELASTIC_TIMEOUT is a usage error.
func (o *Options) ElasticConfig(environ []string) (elastic.Config, error) {
	timeout := elastic.DefaultElasticTimeout
	if o.ElasticTimeout > 0 {
		timeout = seconds(o.ElasticTimeout)
	} else if v, ok := config.Lookup(environ)(EnvElasticTimeout); ok && v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || !positiveSeconds(s) {
			return elastic.Config{}, usagef("%s=%q must be a positive number of seconds", EnvElasticTimeout, v)
		}
		timeout = seconds(s)
	}
	return elastic.Config{
		NP:              o.NP,
		MinNP:           o.MinNP,
		MaxNP:           o.MaxNP,
		ElasticTimeout:  timeout,
		ResetLimit:      o.ResetLimit,
		CooldownMin:     seconds(o.BlacklistCooldownRange[0]),
		CooldownMax:     seconds(o.BlacklistCooldownRange[1]),
		DiscoveryScript: o.HostDiscoveryScript,
	}, nil
}

// ApplyTo overrides c's knobs with the flags that were given; knobs not
// given on the command line keep c's values (from the environment).
func (o *Options) ApplyTo(c config.Config) (config.Config, error) {
	if o.set["fusion-threshold-mb"] {
		c.FusionThreshold = int64(math.Round(o.FusionThresholdMB * (1 << 20)))
	}
	if o.set["cycle-time-ms"] {
		c.CycleTime = time.Duration(math.Round(o.CycleTimeMS * float64(time.Millisecond)))
	}
	if o.set["cache-capacity"] {
		c.CacheCapacity = o.CacheCapacity
	}
	if o.set["timeline-filename"] {
		c.Timeline = o.TimelineFilename
	}
	if o.set["timeline-mark-cycles"] {
		c.TimelineMarkCycles = o.TimelineMarkCycles
	}
	if o.set["no-stall-check"] {
		c.StallCheckDisable = o.NoStallCheck
	}
	if o.set["stall-check-warning-time-seconds"] {
		c.StallCheckTime = seconds(o.StallWarningSeconds)
	}
	if o.set["stall-check-shutdown-time-seconds"] {
		c.StallShutdownTime = seconds(o.StallShutdownSeconds)
	}
	if o.set["heartbeat-timeout-seconds"] {
		c.HeartbeatTimeout = seconds(o.HeartbeatTimeoutSeconds)
	}
	if o.set["log-level"] {
		l, err := config.ParseLogLevel(o.LogLevel)
		if err != nil {
			return c, usagef("--log-level=%s: %v", o.LogLevel, err)
		}
		c.LogLevel = l
	}
	if o.set["log-without-timestamp"] {
		c.LogHideTime = o.LogWithoutTimestamp
	}
	if o.set["mpi-threads-disable"] {
		c.MPIThreadsDisable = o.MPIThreadsDisable
	}
	if o.set["hierarchical-allreduce"] {
		c.HierarchicalAllreduce = o.HierarchicalAllreduce
	}
	if o.set["hierarchical-allgather"] {
		c.HierarchicalAllgather = o.HierarchicalAllgather
	}
	if o.set["autotune"] {
		c.Autotune = o.Autotune
	}
	if o.set["autotune-log-file"] {
		c.AutotuneLog = o.AutotuneLogFile
	}
	if o.set["autotune-warmup-samples"] {
		c.AutotuneWarmupSamples = o.AutotuneWarmupSamples
	}
	if o.set["autotune-steps-per-sample"] {
		c.AutotuneStepsPerSample = o.AutotuneStepsPerSample
	}
	if o.set["autotune-bayes-opt-max-samples"] {
		c.AutotuneMaxSamples = o.AutotuneMaxSamples
	}
	if o.set["autotune-gaussian-process-noise"] {
		c.AutotuneNoise = o.AutotuneNoise
	}
	if o.set["gloo-timeout-seconds"] {
		c.GlooTimeout = seconds(o.GlooTimeoutSeconds)
	}
	if err := c.Validate(); err != nil {
		return c, usagef("%v", err)
	}
	return c, nil
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
