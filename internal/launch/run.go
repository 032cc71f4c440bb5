package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
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
	return l.execute(ctx, plan)
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
	var hosts []Host
	switch {
	case o.Hosts != "":
		if hosts, err = ParseHosts(o.Hosts); err != nil {
			return Spec{}, err
		}
	case o.Hostfile != "":
		f, err := os.Open(o.Hostfile)
		if err != nil {
			return Spec{}, usagef("cannot read --hostfile: %v", err)
		}
		hosts, err = ParseHostfile(f, o.Hostfile)
		f.Close()
		if err != nil {
			return Spec{}, err
		}
	case mpiHostfile(lookup) != "":
		// An MPIJob's launcher pod: the MPI Operator's hostfile.
		name := mpiHostfile(lookup)
		f, err := os.Open(name)
		if err != nil {
			return Spec{}, usagef("cannot read the hostfile that %s names: %v (or give -H)", EnvOMPIHostfile, err)
		}
		hosts, err = ParseHostfile(f, name)
		f.Close()
		if err != nil {
			return Spec{}, err
		}
	default:
		var inSlurm bool
		hosts, inSlurm, err = SlurmHosts(lookup)
		if err != nil {
			return Spec{}, usagef("SLURM allocation: %v (or give -H)", err)
		}
		if !inSlurm {
			if o.NP <= 0 {
				return Spec{}, usagef("-np is required: gohorovodrun -np 4 %s", strings.Join(o.Command, " "))
			}
			hosts = []Host{{Name: "localhost", Slots: o.NP}}
		}
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
	mpirun, err := l.LookPath(name)
	if err != nil {
		return Spec{}, fmt.Errorf("%s not found: install Open MPI or MPICH (make deps installs Open MPI), or set %s: %w", name, EnvMPIRun, err)
	}
	timeout, err := l.startTimeout(o)
	if err != nil {
		return Spec{}, err
	}
	flavor, err := detect(ctx, mpirun, timeout)
	if err != nil {
		return Spec{}, err
	}
	spec.MPIRun, spec.Flavor = mpirun, flavor
	if spec.CMA, err = l.singleCopy(o.SingleCopy, spec); err != nil {
		return Spec{}, err
	}
	return spec, nil
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

// execute runs the plan and turns mpirun's end into Run's result. It
// bounds its own teardown whatever mpirun does: mpirun runs in a process
// group of its own; after an interrupt (ctx) mpirun has StopGrace to stop
// the workers, and after the first failure FailureGrace to end the job
// itself; then the launcher sends SIGTERM to every process of the job it
// knows (jobProcs), and SIGKILL StopGrace later. A job on this host alone
// keeps Open MPI's shared-memory segments in a directory of its own, which
// is removed when the job ends.
func (l *Launcher) execute(ctx context.Context, p Plan) error {
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Env = p.Env
	var dirs []string
	if p.VaderDir != "" {
		cmd.Env = append(append([]string(nil), p.Env...), EnvVaderDir+"="+p.VaderDir)
		dirs = append(dirs, p.VaderDir)
		defer os.RemoveAll(p.VaderDir)
	}
	cmd.Stdin, cmd.Stdout = l.Stdin, l.Stdout
	scan := newFailureScanner()
	reported := make(chan struct{})
	cmd.Stderr = &lineTap{w: l.Stderr, onLine: func(line string) {
		// A rank's failure reported, or mpirun aborting the job: from
		// then on mpirun has FailureGrace to end (it may wait on a node
		// that cannot be reached, whose network went silent).
		was := scan.seen || scan.aborted
		scan.Line(line)
		if (scan.seen || scan.aborted) && !was {
			close(reported)
		}
	}}
	// After mpirun has ended, its output may still be held open by a
	// process it left behind: the launcher stops reading after StopGrace.
	cmd.WaitDelay = StopGrace
	// If the launcher dies without stopping mpirun (SIGKILL), the guard
	// does it; without a guard, a parent-death signal.
	release := make(chan struct{})
	defer close(release)
	cmd.SysProcAttr = workerProcAttr(l.Guard == "")
	if isTerminal(l.Stdin) && cmd.SysProcAttr != nil {
		cmd.SysProcAttr.Setpgid = false // see isTerminal
	}
	var err error
	if l.Guard != "" {
		err = cmd.Start()
	} else {
		err = startLocked(cmd, release)
	}
	if err != nil {
		return fmt.Errorf("starting %s: %w", p.Argv[0], err)
	}
	mark := ""
	if v, ok := envValue(p.Env, config.EnvLauncher); ok && v != "" {
		mark = config.EnvLauncher + "=" + v
	}
	if l.Guard != "" {
		g, gerr := startGuard(l.Guard, []*os.Process{cmd.Process}, dirs, mark, l.Stderr)
		if gerr != nil {
			fmt.Fprintf(l.Stderr, "gohorovodrun: warning: no guard for mpirun (%v): if gohorovodrun is killed, "+
				"mpirun is not stopped (workers on this host still exit)\n", gerr)
		}
		defer g.release()
	}
	procs := newJobProcs(cmd.Process.Pid, mark)
	// A stop signal goes to mpirun as SIGUSR1, which Open MPI's mpirun
	// passes on to every rank (on SIGTERM it would kill them).
	pre := preemptionOf(ctx)
	fwd := make(chan os.Signal, 1)
	pre.setForward(func(sig os.Signal) { fwd <- sig })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var (
		interrupted bool
		tornDown    bool            // the launcher ended the job's processes itself
		found       *jobFailure     // the first failure seen in /proc
		failed      <-chan struct{} = reported
		teardown    <-chan time.Time
		kill        <-chan time.Time
		giveUp      <-chan time.Time
		stuck       bool // mpirun outlived SIGKILL: its output may still be read
		finished    bool // every rank ended with status 0, mpirun has not
		tick        = time.NewTicker(scanEvery)
		ctxDone     = ctx.Done()
	)
	defer tick.Stop()
	name := filepath.Base(p.Argv[0])
	stopAll := func(why string) {
		tornDown, teardown = true, nil
		procs.scan(true)
		fmt.Fprintf(l.Stderr, "gohorovodrun: %s; stopping every process of the job (SIGTERM, SIGKILL after %v)\n", why, StopGrace)
		procs.signal(syscall.SIGTERM)
		kill = time.After(StopGrace)
	}
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-ctxDone:
			ctxDone, failed = nil, nil
			interrupted = true
			// mpirun stops every worker on SIGTERM; after StopGrace, the
			// launcher stops what is left.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			teardown = time.After(StopGrace)
		case <-fwd:
			_ = cmd.Process.Signal(syscall.SIGUSR1)
		case <-failed:
			failed = nil
			if teardown == nil && kill == nil {
				teardown = time.After(FailureGrace)
			}
		case <-tick.C:
			if f, ok := procs.scan(false); ok && found == nil {
				found = &f
				if failed != nil {
					failed = nil
					teardown = time.After(FailureGrace)
				}
			} else if p.VaderDir != "" && p.NP > 0 && procs.endedRanks() == p.NP && teardown == nil && kill == nil && !finished {
				// Every rank of a job on this host has ended well, and
				// mpirun has not reaped them: it has FailureGrace to.
				finished, failed = true, nil
				teardown = time.After(FailureGrace)
			}
		case <-teardown:
			switch {
			case interrupted:
				stopAll(fmt.Sprintf("%s did not stop the job within %v of SIGTERM", name, StopGrace))
			case finished && found == nil:
				stopAll(fmt.Sprintf("every rank has ended with status 0, but %s did not end within %v", name, FailureGrace))
			default:
				stopAll(fmt.Sprintf("%s did not end the job within %v of the first failure", name, FailureGrace))
			}
		case <-kill:
			kill = nil
			procs.scan(true)
			procs.signal(syscall.SIGKILL)
			giveUp = time.After(StopGrace)
		case <-giveUp:
			// Not even SIGKILL ends a process in uninterruptible sleep:
			// the launcher does not wait for it.
			fmt.Fprintf(l.Stderr, "gohorovodrun: %s (pid %d) still there %v after SIGKILL; not waiting for it\n", name, cmd.Process.Pid, StopGrace)
			err = fmt.Errorf("%s (pid %d) did not end after SIGKILL", name, cmd.Process.Pid)
			waiting, stuck = false, true
		}
	}
	if stuck {
		// scan is still being fed: only what the launcher saw itself.
		switch {
		case interrupted:
			return ErrInterrupted
		case found != nil:
			return found.workerError()
		}
		return err
	}
	if interrupted || tornDown || found != nil || scan.seen || err != nil {
		// Whatever mpirun left running (it ended, or was killed, before
		// its workers): SIGTERM, then SIGKILL.
		procs.scan(true)
		if left := procs.alive(); len(left) > 0 {
			procs.signal(syscall.SIGTERM)
			deadline := time.Now().Add(StopGrace)
			for len(procs.alive()) > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			procs.signal(syscall.SIGKILL)
		}
	}
	if interrupted {
		return ErrInterrupted
	}
	if err == nil || finished && tornDown && found == nil && !scan.seen {
		return nil // every rank ended well; mpirun was stopped after them
	}
	if status := exitStatus(err); (pre.exited(status) || pre.preempting()) && found == nil {
		// mpirun passes on the first non-zero status of a rank: every
		// rank stopped at a step boundary (ExitPreempted), or was
		// stopped by the signal passed on.
		return pre.result(err)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		status := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if !scan.seen && found != nil {
				return found.workerError()
			}
			if !scan.seen { // no rank failed: mpirun itself was killed
				return fmt.Errorf("%s was killed by signal %d (%s)", name, int(ws.Signal()), SignalName(int(ws.Signal())))
			}
			status = 128 + int(ws.Signal())
		}
		if !scan.seen && found != nil {
			return found.workerError()
		}
		return scan.result(status)
	}
	return fmt.Errorf("%s: %w", name, err)
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
