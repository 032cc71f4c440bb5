package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/internal/launch/elastic"
	"github.com/gohorovod/gohorovod/internal/procid"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// Version is gohorovodrun's version.
const Version = "0.1.0"

// ErrInterrupted is returned when the launcher was told to stop (Ctrl-C,
// SIGTERM) and stopped the job.
var ErrInterrupted = errors.New("launch: interrupted; the workers were stopped")

// EnvMPIRun names the mpirun to use (a name on PATH or a path), for
// machines with several MPI implementations installed, e.g.
// GOHOROVOD_MPIRUN=mpirun.mpich. The default is "mpirun".
const EnvMPIRun = "GOHOROVOD_MPIRUN"

// StopGrace is how long mpirun has to stop the workers after SIGTERM
// before it is killed, and how long the processes of a job the launcher
// stops itself have between SIGTERM and SIGKILL.
const StopGrace = 3 * time.Second

// BuildInfo says what the binary was built with, for --check-build.
type BuildInfo struct {
	MPIBuiltIn bool
	MPILibrary string        // the MPI the binary links, e.g. "Open MPI"
	MPIVersion func() string // MPI_Get_library_version; nil: unknown
	// GPU describes the CUDA runtime and NCCL found at run time; nil when
	// this build has no GPU support.
	GPU func() string
}

// Launcher runs gohorovodrun. Its fields are the outside world, injected so
// that tests can replace them; NewLauncher fills them from the process.
type Launcher struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Environ        []string
	LookPath       func(string) (string, error)
	IsLocal        func(string) bool
	SSH            SSHRunner
	SSHRetry       time.Duration // pause between ssh attempts; 0: SSHCheck's default
	CPUs           int
	Root           bool
	Build          BuildInfo
	// Self names the launcher process to its workers (GOHOROVOD_LAUNCHER),
	// which exit when it is gone; nil: the workers do not watch it.
	Self func() (procid.ID, error)
	// Guard is a gohorovodrun binary to start as the guard of each job
	// (see GuardMain): it stops mpirun if the launcher dies without doing
	// so. "": no guard; mpirun then gets a parent-death signal instead.
	Guard string
	// ProbeCMA reports whether cross-memory attach works between two
	// processes here (see ProbeCMA); nil: it does not.
	ProbeCMA func() error
	// Signals delivers the signals that ask the job to stop (StopSignals,
	// which gohorovodrun's main subscribes to): the first is passed on to
	// the workers, which stop at their next step boundary and exit with
	// ExitPreempted (optim/preempt), and the launcher waits for them; a
	// second one, or PreemptGrace running out, stops them at once (as
	// cancelling Run's context does). nil: signals are not watched.
	Signals <-chan os.Signal
	// PreemptGrace is how long the workers have to stop after the first
	// signal, or after the first worker exited with ExitPreempted; 0: the
	// workers' default grace period (optim/preempt) plus 5 s.
	PreemptGrace time.Duration
}

// NewLauncher returns a Launcher over this process's streams, environment,
// PATH, host names and ssh. Its Guard is this executable, so the program's
// main must call GuardMain before anything else.
func NewLauncher(build BuildInfo) *Launcher {
	exe, _ := os.Executable()
	return &Launcher{
		Self:  procid.Self,
		Guard: exe,
		ProbeCMA: func() error {
			if exe == "" {
				return errors.New("cannot find this executable to run the probe")
			}
			return ProbeCMA(exe)
		},
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Environ:  os.Environ(),
		LookPath: exec.LookPath,
		IsLocal:  NewLocality().IsLocal,
		SSH:      ExecRunner,
		CPUs:     runtime.NumCPU(),
		Root:     os.Geteuid() == 0,
		Build:    build,
	}
}

// ExitCode maps Run's error to the process exit status: 0 for nil, 2 for
// bad input, the failing rank's status for a worker failure, the discovery
// script's status when its first run failed (elastic mode), 130 after an
// interrupt, 1 otherwise.
func ExitCode(err error) int {
	var we *WorkerError
	var de *elastic.DiscoveryError
	switch {
	case err == nil:
		return 0
	case IsUsage(err):
		return 2
	case errors.As(err, &we):
		return we.ExitCode()
	case errors.As(err, &de) && de.ExitCode > 0 && de.ExitCode < 256:
		var te *elastic.DiscoveryTimeoutError
		if errors.As(err, &te) {
			return 1
		}
		return de.ExitCode
	case errors.Is(err, ErrInterrupted):
		return 130
	case errors.Is(err, ErrPreempted):
		return ExitPreempted
	}
	return 1
}

// Run parses args (without the program name) and does what they say. It
// returns when the job has ended and nothing it started is left running;
// cancelling ctx stops the job.
func (l *Launcher) Run(ctx context.Context, args []string) error {
	o, err := Parse(args, l.Stdout)
	if err != nil {
		return err
	}
	if o.Version {
		fmt.Fprintf(l.Stdout, "gohorovodrun %s\n", Version)
		return nil
	}
	if o.CheckBuild {
		l.checkBuild(ctx)
		return nil
	}
	if o.Elastic() {
		o.Gloo = true // elastic jobs run on the embedded transport (check refuses --mpi)
	}
	grace := l.PreemptGrace
	if o.PreemptGrace > 0 {
		grace = seconds(o.PreemptGrace)
	}
	ctx, pre, stopWatch := l.watchSignals(ctx, grace)
	defer stopWatch()
	if pre != nil {
		environ := l.Environ
		l.Environ = pre.workerEnviron(environ) // the workers announce there that they listen
		defer func() { l.Environ = environ }()
	}
	ctx = context.WithValue(ctx, preemptionKey{}, pre)
	nodes, multiNode, err := NodesFrom(o, config.Lookup(l.Environ), l.CPUs)
	if err != nil {
		return err
	}
	if multiNode {
		return l.runNodesFrom(ctx, o, nodes)
	}
	spec, err := l.Spec(ctx, o)
	if err != nil {
		return err
	}
	for _, w := range knobWarnings(o, spec.Config) {
		fmt.Fprintln(l.Stderr, "gohorovodrun: "+w)
	}
	if o.Elastic() {
		return l.runElastic(ctx, o, spec)
	}
	if spec.Gloo {
		return l.runGloo(ctx, o, spec)
	}
	plan, err := BuildPlan(spec)
	if err != nil {
		return err
	}
	if o.DryRun || o.Verbose {
		l.printPlan(spec, plan)
	}
	if o.DryRun {
		return nil
	}
	if err := l.checkHosts(ctx, o, spec); err != nil {
		return err
	}
	if o.OutputFilename != "" && spec.Flavor != OpenMPI {
		if err := os.MkdirAll(o.OutputFilename, 0o755); err != nil {
			return fmt.Errorf("--output-filename: %w", err)
		}
	}
	if spec.Flavor == OpenMPI && spec.AllLocal() {
		if plan.VaderDir, err = vaderDir(plan.Env, spec.MPIArgs); err != nil {
			return fmt.Errorf("launch: a directory for the job's shared memory: %w", err)
		}
	}
	return l.drive(ctx, &mpiRun{l: l, p: plan})
}

func (l *Launcher) startTimeout(o *Options) (time.Duration, error) {
	if o.StartTimeout > 0 {
		return seconds(o.StartTimeout), nil
	}
	if v, ok := config.Lookup(l.Environ)(EnvStartTimeout); ok && v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			return 0, usagef("%s=%q must be a positive number of seconds", EnvStartTimeout, v)
		}
		return seconds(s), nil
	}
	return DefaultStartTimeout, nil
}

// Spec gathers what the plan needs: the hosts (from -H, --hostfile, the
// SLURM allocation, or localhost), the knobs (environment, then flags),
// the program, and the MPI flavour (running `mpirun --version`).
func (l *Launcher) Spec(ctx context.Context, o *Options) (Spec, error) {
	lookup := config.Lookup(l.Environ)
	cfg, err := config.FromEnv(lookup)
	if err != nil {
		return Spec{}, usagef("%v (in the launcher's environment)", err)
	}
	if cfg, err = o.ApplyTo(cfg); err != nil {
		return Spec{}, err
	}
	cfg = withoutPlacement(cfg)
	hosts, err := specHosts(o, lookup)
	if err != nil {
		return Spec{}, err
	}
	np := o.NP
	if np <= 0 {
		if o.Hosts != "" || o.Hostfile != "" || mpiHostfile(lookup) != "" {
			return Spec{}, usagef("-np is required: gohorovodrun -np %d ...", TotalSlots(hosts))
		}
		np = TotalSlots(hosts) // the whole SLURM allocation
	}
	if _, err := Assign(hosts, np); err != nil {
		return Spec{}, err
	}
	mpiArgs, err := SplitArgs(o.MPIArgs)
	if err != nil {
		return Spec{}, usagef("--mpi-args: %v", err)
	}
	var self string
	if l.Self != nil {
		if id, err := l.Self(); err == nil {
			self = id.String()
		} else {
			fmt.Fprintf(l.Stderr, "gohorovodrun: warning: workers will not watch the launcher: %v\n", err)
		}
	}
	spec := Spec{
		Launcher: self, NP: np, Hosts: hosts, Command: o.Command,
		Config: cfg, Environ: l.Environ, Root: l.Root, CPUs: l.CPUs, IsLocal: l.IsLocal,
		SSHPort: o.SSHPort, SSHIdentity: o.SSHIdentity, NICs: o.NICs,
		OutputFilename: o.OutputFilename, MPIArgs: mpiArgs,
	}
	name, chosen := "mpirun", false
	if v, ok := lookup(EnvMPIRun); ok && v != "" {
		name, chosen = v, true
	}
	spec.Gloo = o.Gloo
	if !o.Gloo && !o.MPI && !chosen {
		if _, err := l.LookPath(name); err != nil {
			spec.Gloo = true
			fmt.Fprintln(l.Stderr, "gohorovodrun: mpirun not found on PATH: running the workers on the embedded transport (--gloo)")
		}
	}
	if err := l.checkProgram(o.Command[0], spec.Gloo); err != nil {
		return Spec{}, err
	}
	if spec.Gloo {
		if o.SingleCopy == "cma" {
			return Spec{}, usagef("--mpi-single-copy=cma needs mpirun (Open MPI), not the embedded transport")
		}
		spec.Dir, _ = os.Getwd()
		return spec, nil
	}
	if err := l.mpiSpec(ctx, o, name, &spec); err != nil {
		return Spec{}, err
	}
	return spec, nil
}

// mpiSpec finds mpirun (name), its flavour (running `mpirun --version`)
// and whether its ranks use cross-memory attach.
func (l *Launcher) mpiSpec(ctx context.Context, o *Options, name string, spec *Spec) error {
	mpirun, err := l.LookPath(name)
	if err != nil {
		return fmt.Errorf("%s not found: install Open MPI or MPICH (make deps installs Open MPI), or set %s: %w", name, EnvMPIRun, err)
	}
	timeout, err := l.startTimeout(o)
	if err != nil {
		return err
	}
	flavor, err := detect(ctx, mpirun, timeout)
	if err != nil {
		return err
	}
	spec.MPIRun, spec.Flavor = mpirun, flavor
	spec.CMA, err = l.singleCopy(o.SingleCopy, *spec)
	return err
}

// specHosts are the job's hosts: -H, --hostfile, the MPI Operator's
// hostfile, the SLURM allocation, or localhost with -np slots.
func specHosts(o *Options, lookup func(string) (string, bool)) (hosts []Host, err error) {
	switch {
	case o.Hosts != "":
		if hosts, err = ParseHosts(o.Hosts); err != nil {
			return nil, err
		}
	case o.Hostfile != "":
		f, err := os.Open(o.Hostfile)
		if err != nil {
			return nil, usagef("cannot read --hostfile: %v", err)
		}
		hosts, err = ParseHostfile(f, o.Hostfile)
		f.Close()
		if err != nil {
			return nil, err
		}
	case mpiHostfile(lookup) != "":
		// An MPIJob's launcher pod: the MPI Operator's hostfile.
		name := mpiHostfile(lookup)
		f, err := os.Open(name)
		if err != nil {
			return nil, usagef("cannot read the hostfile that %s names: %v (or give -H)", EnvOMPIHostfile, err)
		}
		hosts, err = ParseHostfile(f, name)
		f.Close()
		if err != nil {
			return nil, err
		}
	default:
		var inSlurm bool
		hosts, inSlurm, err = SlurmHosts(lookup)
		if err != nil {
			return nil, usagef("SLURM allocation: %v (or give -H)", err)
		}
		if !inSlurm {
			if o.NP <= 0 {
				return nil, usagef("-np is required: gohorovodrun -np 4 %s", strings.Join(o.Command, " "))
			}
			hosts = []Host{{Name: "localhost", Slots: o.NP}}
		}
	}
	return hosts, nil
}

// checkProgram refuses a program that cannot be run: a path that is not
// an executable file, or a name not found on PATH. gloo says which
// transport the job uses, for the hint on how to build a missing program:
// only MPI needs -tags mpi.
func (l *Launcher) checkProgram(prog string, gloo bool) error {
	if !strings.ContainsRune(prog, '/') {
		if _, err := l.LookPath(prog); err != nil {
			return usagef("program %q not found on PATH (give a path, e.g. ./%s)", prog, prog)
		}
		return nil
	}
	st, err := os.Stat(prog)
	switch {
	case err != nil:
		if gloo {
			return usagef("program %s does not exist (build it first, e.g. go build -o %s .)", prog, prog)
		}
		return usagef("program %s does not exist (build it first, e.g. go build -tags mpi -o %s .)", prog, prog)
	case st.IsDir():
		return usagef("program %s is a directory", prog)
	case st.Mode()&0o111 == 0:
		return usagef("program %s is not executable (chmod +x %s)", prog, prog)
	}
	return nil
}

func detect(ctx context.Context, mpirun string, timeout time.Duration) (Flavor, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, mpirun, "--version").CombinedOutput()
	if f, derr := DetectFlavor(string(out)); derr == nil {
		return f, nil
	} else if err != nil {
		return FlavorUnknown, fmt.Errorf("%s --version failed: %v: %s", mpirun, err, bytes.TrimSpace(out))
	} else {
		return FlavorUnknown, derr
	}
}

func (l *Launcher) printPlan(s Spec, p Plan) {
	var knobs []string
	def := config.Default().Environ()
	for i, kv := range s.Config.Environ() {
		if i >= len(def) || kv != def[i] {
			knobs = append(knobs, quote(kv))
		}
	}
	prefix := ""
	if len(knobs) > 0 {
		prefix = strings.Join(knobs, " ") + " "
	}
	fmt.Fprintf(l.Stdout, "%s%s\n", prefix, ShellQuote(p.Argv))
}

// checkHosts probes the remote hosts the job uses with ssh.
func (l *Launcher) checkHosts(ctx context.Context, o *Options, s Spec) error {
	var remote []string
	for _, h := range usedHosts(s.Hosts, s.NP) {
		if l.IsLocal == nil || !l.IsLocal(h.Name) {
			remote = append(remote, h.Name)
		}
	}
	if len(remote) == 0 {
		return nil
	}
	timeout, err := l.startTimeout(o)
	if err != nil {
		return err
	}
	if o.Verbose {
		fmt.Fprintf(l.Stderr, "gohorovodrun: checking ssh to %s\n", strings.Join(remote, ", "))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	chk := SSHCheck{Port: o.SSHPort, Identity: o.SSHIdentity, Run: l.SSH, Retry: l.SSHRetry}
	if err := chk.Check(ctx, remote); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("timed out waiting for ssh checks. Please check connectivity between servers; "+
				"you may need to increase --start-timeout (now %v) if you have many servers: %w", timeout, err)
		}
		return err
	}
	return nil
}

func (l *Launcher) checkBuild(ctx context.Context) {
	b := l.Build
	mark := func(ok bool) string {
		if ok {
			return "[X]"
		}
		return "[ ]"
	}
	w := l.Stdout
	fmt.Fprintf(w, "gohorovod v%s (%s):\n\n", Version, runtime.Version())
	fmt.Fprintf(w, "Available controllers:\n")
	if b.MPIBuiltIn {
		fmt.Fprintf(w, "    %s MPI (links %s)\n", mark(true), b.MPILibrary)
	} else {
		fmt.Fprintf(w, "    %s MPI (not built in: rebuild with -tags mpi)\n", mark(false))
	}
	fmt.Fprintf(w, "    %s Gloo (the embedded transport: gohorovodrun --gloo)\n", mark(true))
	fmt.Fprintf(w, "\nAvailable tensor operations:\n")
	fmt.Fprintf(w, "    %s MPI\n", mark(b.MPIBuiltIn))
	if b.GPU == nil {
		fmt.Fprintf(w, "    %s NCCL (not built)\n", mark(false))
	} else {
		d := strings.TrimSpace(b.GPU())
		ok := strings.Contains(d, "NCCL") && !strings.Contains(d, "NCCL: unavailable")
		if ok {
			fmt.Fprintf(w, "    %s NCCL (found at run time)\n", mark(true))
		} else {
			fmt.Fprintf(w, "    %s NCCL (built in; not found at run time)\n", mark(false))
		}
		fmt.Fprintf(w, "\nGPU libraries at run time:\n    %s\n", strings.ReplaceAll(d, "\n", "\n    "))
	}
	if b.MPIBuiltIn && b.MPIVersion != nil {
		v, _, _ := strings.Cut(strings.TrimSpace(b.MPIVersion()), "\n")
		fmt.Fprintf(w, "\nMPI library: %s\n", strings.TrimSpace(v))
	}
	if p, err := l.LookPath("mpirun"); err != nil {
		fmt.Fprintf(w, "mpirun: not found on PATH\n")
	} else if f, err := detect(ctx, p, 10*time.Second); err != nil {
		fmt.Fprintf(w, "mpirun: %s (%v)\n", p, err)
	} else {
		fmt.Fprintf(w, "mpirun: %s (%s)\n", p, f)
		if b.MPIBuiltIn && !strings.EqualFold(f.String(), b.MPILibrary) {
			fmt.Fprintf(w, "WARNING: this build links %s but mpirun is %s: workers would each run as rank 0 of 1\n", b.MPILibrary, f)
		}
	}
}

// singleCopy decides --mpi-single-copy: whether the ranks of one host use
// cross-memory attach. It matters only to a job under Open MPI's mpirun
// on this host alone; there, cma is refused and auto (the default) falls
// back to none (with a note) where the probe finds it does not work.
func (l *Launcher) singleCopy(mode string, spec Spec) (bool, error) {
	switch mode {
	case "none", "":
		return false, nil
	case "cma", "auto":
	default:
		return false, usagef("--mpi-single-copy %q: want none, cma or auto", mode)
	}
	if spec.Flavor != OpenMPI {
		if mode == "cma" {
			return false, usagef("--mpi-single-copy=cma is Open MPI's (vader) mechanism; this mpirun is %v", spec.Flavor)
		}
		return false, nil
	}
	if !spec.AllLocal() {
		return false, nil
	}
	if l.ProbeCMA == nil { // a launcher without a probe (tests): cma is refused, auto is none
		if mode == "cma" {
			return false, usagef("--mpi-single-copy=cma: no probe")
		}
		return false, nil
	}
	err := l.ProbeCMA()
	switch {
	case err == nil:
		return true, nil
	case mode == "cma":
		return false, usagef("--mpi-single-copy=cma: %v", err)
	}
	fmt.Fprintf(l.Stderr, "gohorovodrun: --mpi-single-copy=auto: copying through shared memory: %v\n", err)
	return false, nil
}
