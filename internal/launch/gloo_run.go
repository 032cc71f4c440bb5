package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/secret"
	"github.com/gohorovod/gohorovod/internal/sockdir"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// WorkerStopGrace is how long the workers of the embedded transport have
// to end after SIGTERM before they are killed.
const WorkerStopGrace = 5 * time.Second

// RendezvousError reports a job whose workers did not all reach the
// rendezvous in time; the launcher stopped the others.
type RendezvousError struct {
	Err     error         // the server's *rendezvous.MissingError
	Timeout time.Duration // HOROVOD_GLOO_TIMEOUT_SECONDS
}

// Error implements the error interface.
// e.g. "rendezvous timed out after 30s (--gloo-timeout-seconds,
// HOROVOD_GLOO_TIMEOUT_SECONDS): host h2 local rank 1 never arrived; the
// other workers were stopped".
func (e *RendezvousError) Error() string {
	var me *rendezvous.MissingError
	if errors.As(e.Err, &me) {
		m := *me
		m.Reason = fmt.Sprintf("%s after %v (--gloo-timeout-seconds, HOROVOD_GLOO_TIMEOUT_SECONDS)", m.Reason, e.Timeout)
		return m.Error() + "; the other workers were stopped"
	}
	return fmt.Sprintf("rendezvous: %v; the other workers were stopped", e.Err)
}

// Unwrap returns Err.
func (e *RendezvousError) Unwrap() error { return e.Err }

// runGloo runs a job on the embedded transport: the rendezvous server on a
// free port, a fresh secret, the workers.
func (l *Launcher) runGloo(ctx context.Context, o *Options, spec Spec) error {
	return l.drive(ctx, &glooRun{l: l, o: o, s: spec})
}

// planJob plans a job of this launcher's own: the rendezvous server on a
// free port, a fresh secret, the workers.
func (r *glooRun) planJob(ctx context.Context, td *teardown) error {
	l, o := r.l, r.o
	host, listen, err := rendezvousHost(r.s)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("the rendezvous server cannot listen on %s: %w", listen, err)
	}
	td.add(func() { ln.Close() })
	secret, err := secret.New()
	if err != nil {
		return err
	}
	r.s.RendezvousAddr, r.s.RendezvousPort = host, ln.Addr().(*net.TCPAddr).Port
	r.s.Secret = config.Secret(secret)
	if !o.DryRun {
		if r.s.SocketDir, err = jobSocketDir(l.Environ); err != nil {
			return err
		}
		dir := r.s.SocketDir
		td.add(func() { sockdir.Remove(dir) })
	}
	if r.workers, err = BuildGlooPlan(r.s); err != nil {
		return err
	}
	if o.DryRun || o.Verbose {
		for _, line := range DescribeGlooPlan(r.workers) {
			fmt.Fprintln(l.Stdout, line)
		}
	}
	if o.DryRun {
		return errNothingToRun
	}
	if err := l.checkHosts(ctx, o, r.s); err != nil {
		return err
	}
	key, err := r.s.Secret.Bytes()
	if err != nil {
		return err
	}
	expect := make([]rendezvous.Slot, len(r.workers))
	for i, w := range r.workers {
		expect[i] = rendezvous.Slot{Host: w.Slot.Host, LocalRank: w.Slot.LocalRank}
	}
	if r.srv, err = l.serveRendezvous(td, ln, key, expect); err != nil {
		return err
	}
	return nil
}

// serveRendezvous serves the workers' rendezvous of the slots expect on
// ln until teardown.
func (l *Launcher) serveRendezvous(td *teardown, ln net.Listener, key []byte, expect []rendezvous.Slot) (*rendezvous.Server, error) {
	srv, err := rendezvous.NewServer(key, expect)
	if err != nil {
		return nil, err
	}
	srv.Logf = l.logf
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	td.add(func() { srv.Close(); <-served })
	return srv, nil
}

// logf writes a line of the launcher's own to its stderr.
func (l *Launcher) logf(format string, args ...any) {
	fmt.Fprintf(l.Stderr, "gohorovodrun: "+format+"\n", args...)
}

// rendezvousHost decides where the workers reach the rendezvous server and
// where it listens: 127.0.0.1 for a job on this machine only; else the
// first address of --network-interface, or this machine's address on the
// route to the first remote host, listening on every interface.
func rendezvousHost(s Spec) (host, listen string, err error) {
	var remote string
	for _, h := range usedHosts(s.Hosts, s.NP) {
		if s.IsLocal == nil || !s.IsLocal(h.Name) {
			remote = h.Name
			break
		}
	}
	if remote == "" {
		return "127.0.0.1", "127.0.0.1:0", nil
	}
	iface := ""
	if len(s.NICs) > 0 {
		iface = s.NICs[0]
	}
	host, err = rendezvous.ListenHost("", iface, net.JoinHostPort(remote, "22"))
	if err != nil {
		return "", "", fmt.Errorf("cannot find this machine's address for the workers on %s: %w (give --network-interface)", remote, err)
	}
	return host, ":0", nil
}

// glooProc is one started worker.
type glooProc struct {
	w      GlooWorker
	cmd    *exec.Cmd
	stdin  io.WriteCloser // remote workers: closing it stops them
	out    []*prefixWriter
	files  []*os.File
	exited bool
}

type glooExit struct {
	i   int
	err error
}

// glooRun is the run path of workers on the embedded transport: a job
// of this launcher's own (node nil), or one node's workers of a
// multi-node job. It starts the workers, watches them and the rendezvous,
// and turns the job's end into Run's result. srv is nil where another
// launcher hosts the rendezvous (a node of a multi-node job); an error
// from abort (nil: none) stops the workers and is the result, before any
// worker's failure that the abort caused.
type glooRun struct {
	l       *Launcher
	o       *Options
	s       Spec
	node    *nodePart
	srv     *rendezvous.Server
	abort   <-chan error
	workers []GlooWorker

	outMu, errMu sync.Mutex
	words        *wordsKeeper
	timeout      time.Duration // the rendezvous' (HOROVOD_GLOO_TIMEOUT_SECONDS)
	rctx         context.Context
	procs        []*glooProc
	release      chan struct{}

	first       *WorkerError
	rdzvErr     error
	abortErr    error
	interrupted bool
	stop        graceStop
}

// nodePart is the part of a multi-node job whose workers a glooRun runs:
// the nodes, their labels, and the rendezvous port at node 0.
type nodePart struct {
	n      Nodes
	labels []string
	port   int
}

func (r *glooRun) forwards() bool { return true }

func (r *glooRun) plan(ctx context.Context, td *teardown) error {
	var err error
	if r.node != nil {
		err = r.planNode(td)
	} else {
		err = r.planJob(ctx, td)
	}
	if err != nil {
		return err
	}
	r.words = &wordsKeeper{scan: newFailureScanner()}
	// The server's deadline starts before the first worker does, so that
	// it passes before any worker's own (which starts at its Join): the
	// job then ends with the server's account of who is missing.
	r.timeout = r.s.Config.GlooTimeout
	rctx, cancel := context.WithCancel(ctx)
	if r.timeout > 0 {
		rctx, cancel = context.WithTimeout(ctx, r.timeout)
	}
	r.rctx = rctx
	td.add(cancel)
	return nil
}

// planNode plans this node's workers of a multi-node job.
func (r *glooRun) planNode(td *teardown) error {
	var err error
	if r.s.SocketDir, err = jobSocketDir(r.l.Environ); err != nil {
		return err
	}
	dir := r.s.SocketDir
	td.add(func() { sockdir.Remove(dir) })
	r.workers, err = r.l.nodeWorkers(r.s, r.node.n, r.node.labels, r.node.port, r.o.Verbose)
	return err
}

func (r *glooRun) start(_ context.Context, td *teardown) error {
	if err := glooFiles(r.workers, r.o.OutputFilename != ""); err != nil {
		return err
	}
	r.procs = make([]*glooProc, len(r.workers))
	r.release = make(chan struct{})
	td.add(func() { close(r.release) })
	var started []*os.Process
	for i := range r.workers {
		if err := r.startWorker(i); err != nil {
			r.l.stopAll(r.procs[:i], syscall.SIGKILL)
			r.l.reap(r.procs[:i])
			return err
		}
		started = append(started, r.procs[i].cmd.Process)
	}
	var dirs []string
	if r.s.SocketDir != "" {
		dirs = append(dirs, r.s.SocketDir)
	}
	mark := ""
	if r.s.Launcher != "" {
		mark = config.EnvLauncher + "=" + r.s.Launcher
	}
	r.l.guardJob(td, started, dirs, mark, func(err error) string {
		return fmt.Sprintf("no guard for the workers (%v): if gohorovodrun is killed, "+
			"the workers are not stopped (those that watch the launcher still exit)", err)
	})
	return nil
}

// startWorker starts worker i, its output prefixed with its rank (and
// copied to --output-filename's directory).
func (r *glooRun) startWorker(i int) error {
	l, w := r.l, r.workers[i]
	p := &glooProc{w: w}
	r.procs[i] = p
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.Env = w.Env
	cmd.SysProcAttr = workerProcAttr(l.Guard == "")
	cmd.WaitDelay = 2 * time.Second
	tag := fmt.Sprintf("[1,%d]", w.Slot.Rank)
	stdout := newPrefixWriter(l.Stdout, &r.outMu, tag+"<stdout>:", nil)
	rank := w.Slot.Rank
	stderr := newPrefixWriter(l.Stderr, &r.errMu, tag+"<stderr>:", func(line string) { r.words.note(rank, line) })
	p.out = []*prefixWriter{stdout, stderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if outDir := r.o.OutputFilename; outDir != "" {
		width := len(fmt.Sprint(len(r.workers) - 1))
		dir := filepath.Join(outDir, fmt.Sprintf("rank.%0*d", width, w.Slot.Rank))
		fo, fe, err := openOutput(dir, false)
		if err != nil {
			return fmt.Errorf("--output-filename: %w", err)
		}
		p.files = []*os.File{fo, fe}
		cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, fo), io.MultiWriter(stderr, fe)
	}
	var err error
	if w.Stdin != "" {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return err
		}
	}
	p.cmd = cmd
	if l.Guard == "" {
		err = startLocked(cmd, r.release)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		p.cmd = nil
		return fmt.Errorf("starting rank %d (%s): %w", w.Slot.Rank, w.Argv[0], err)
	}
	if p.stdin != nil {
		go func() { _, _ = io.WriteString(p.stdin, w.Stdin) }()
	}
	return nil
}

func (r *glooRun) watch(ctx context.Context, w *watching) error {
	exits := make(chan glooExit, len(r.procs))
	for i, p := range r.procs {
		go func() {
			err := p.cmd.Wait()
			for _, w := range p.out {
				w.Flush()
			}
			exits <- glooExit{i, err}
		}()
	}
	rdzv := make(chan error, 1)
	var srvDone <-chan struct{}
	if r.srv != nil {
		go func() { rdzv <- r.srv.Wait(r.rctx) }()
		srvDone = r.srv.Done()
	}
	multiHost := len(usedHosts(r.s.Hosts, r.s.NP)) > 1
	rdzvc, abort := (<-chan error)(rdzv), r.abort
	for remaining := len(r.procs); remaining > 0; {
		select {
		case e := <-exits:
			remaining--
			r.exited(e, w.pre, multiHost, srvDone)
		case err := <-rdzvc:
			rdzvc = nil
			if err != nil && !r.stop.stopping && ctx.Err() == nil {
				r.rdzvErr = err
				r.stopWorkers()
			}
		case err := <-abort:
			abort = nil
			if r.abortErr == nil && !r.interrupted {
				r.abortErr = err
			}
			r.stopWorkers()
		case <-ctx.Done():
			if !r.stop.stopping {
				r.interrupted = true
				r.stopWorkers()
			}
		case sig := <-w.signals:
			if !r.stop.stopping {
				r.l.forwardAll(r.procs, sig.(syscall.Signal))
			}
		case <-r.stop.kill:
			r.l.stopAll(r.procs, syscall.SIGKILL)
			r.stop.kill = nil
		}
	}
	for _, p := range r.procs {
		for _, f := range p.files {
			f.Close()
		}
	}
	var cause error // nil, not a nil *WorkerError: "no worker failed"
	if r.first != nil {
		cause = r.first
	}
	if ok, err := w.verdict(r.interrupted, cause); ok {
		return err
	}
	switch {
	case r.abortErr != nil:
		return r.abortErr
	case r.rdzvErr != nil:
		return &RendezvousError{Err: r.rdzvErr, Timeout: r.timeout}
	case r.first != nil:
		return r.first
	}
	return nil
}

// outranks reports whether c, a worker's failure seen after the job's
// first, names the job's cause better: a worker killed by a signal the
// launcher did not send (it stops the others with SIGTERM, and with SIGKILL
// only once the grace period is over) outranks a first failure that was a
// worker's own exit, which the loss of the killed one may have caused (its
// peers lose their connections to it within milliseconds, and which end
// the launcher sees first is a race).
func (r *glooRun) outranks(c *WorkerError) bool {
	if r.first.Signal != 0 || c.Signal == 0 || c.Signal == int(syscall.SIGTERM) {
		return false
	}
	escalated := r.stop.stopping && r.stop.kill == nil
	return !(c.Signal == int(syscall.SIGKILL) && escalated)
}

// stopWorkers stops the workers, once: SIGTERM, SIGKILL after
// WorkerStopGrace.
func (r *glooRun) stopWorkers() {
	if r.stop.begin(WorkerStopGrace) {
		r.l.stopAll(r.procs, syscall.SIGTERM)
	}
}

// exited takes a worker's end: the job's first failure stops the others.
func (r *glooRun) exited(e glooExit, pre *preemption, multiHost bool, srvDone <-chan struct{}) {
	p := r.procs[e.i]
	p.exited = true
	if p.stdin != nil {
		p.stdin.Close()
	}
	// A worker that stopped because it was told to is no failure, and
	// while the job is being preempted the others are left to stop by
	// themselves (a SIGTERM now would be their second signal): the grace
	// period bounds that.
	if pre.exited(exitStatus(e.err)) {
		return
	}
	if pre.preempting() {
		if e.err != nil && r.first == nil {
			r.first = glooFailure(p, e.err, multiHost, r.words)
		}
		return
	}
	if e.err != nil && r.first != nil {
		if c := glooFailure(p, e.err, multiHost, r.words); r.outranks(c) {
			r.first = c
		}
		return
	}
	if e.err == nil || r.stop.stopping {
		return
	}
	r.first = glooFailure(p, e.err, multiHost, r.words)
	// A worker that failed because the rendezvous did: the server ends
	// the rendezvous (Done) before it tells the workers, so this is seen
	// here first.
	select {
	case <-srvDone:
		if err := r.srv.Wait(context.Background()); err != nil && !errors.Is(err, rendezvous.ErrClosed) {
			r.rdzvErr = err
		}
	default:
	}
	r.stopWorkers()
}

// stopAll sends sig to every worker still running: to its process group
// (local workers), or to ssh after closing its input, which stops the
// remote program (remoteScript).
func (l *Launcher) stopAll(procs []*glooProc, sig syscall.Signal) {
	for _, p := range procs {
		if p == nil || p.cmd == nil || p.exited {
			continue
		}
		if p.stdin != nil {
			p.stdin.Close()
		}
		if err := p.cmd.Process.Signal(sig); err == nil && !p.w.Remote {
			signalGroup(p.cmd.Process.Pid, sig)
			if sig == syscall.SIGTERM {
				// A stopped (frozen) worker acts on SIGTERM only once
				// continued, as systemd does it.
				signalGroup(p.cmd.Process.Pid, syscall.SIGCONT)
			}
		}
	}
}

// forwardAll passes a stop signal on, once, to the local workers still
// running, to each one's process group (it leads one), so that a
// wrapper's program gets it too. Remote workers are left alone: ssh would
// not pass the signal on but end them, and the ranks' agreement at the
// next step boundary stops them with the others. Only when no local
// worker is left does their ssh get it.
func (l *Launcher) forwardAll(procs []*glooProc, sig syscall.Signal) {
	local := 0
	for _, p := range procs {
		if p != nil && p.cmd != nil && !p.exited && !p.w.Remote {
			signalGroup(p.cmd.Process.Pid, sig)
			local++
		}
	}
	for _, p := range procs {
		if local == 0 && p != nil && p.cmd != nil && !p.exited {
			_ = p.cmd.Process.Signal(sig)
		}
	}
}

// reap waits for workers started before a failure to start the others.
func (l *Launcher) reap(procs []*glooProc) {
	for _, p := range procs {
		if p != nil && p.cmd != nil {
			_ = p.cmd.Wait()
		}
	}
}

// glooFailure describes a worker's failure in the words of the MPI path.
func glooFailure(p *glooProc, err error, multiHost bool, words *wordsKeeper) *WorkerError {
	we := &WorkerError{Rank: p.w.Slot.Rank, Code: 1, LastWords: words.last(p.w.Slot.Rank)}
	if multiHost || p.w.Remote {
		we.Host = p.w.Slot.Host
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if we.LastWords == "" {
			we.LastWords = err.Error()
		}
		return we
	}
	we.Code = ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		we.Signal = int(ws.Signal())
		we.Code = 128 + we.Signal
		if !p.w.Remote {
			we.PID = p.cmd.Process.Pid
		}
	}
	return we
}

// openOutput creates dir/stdout and dir/stderr, truncated, or opened for
// appending with appendTo (an elastic slot's later workers).
func openOutput(dir string, appendTo bool) (*os.File, *os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	fo, err := os.OpenFile(filepath.Join(dir, "stdout"), flag, 0o644)
	if err != nil {
		return nil, nil, err
	}
	fe, err := os.OpenFile(filepath.Join(dir, "stderr"), flag, 0o644)
	if err != nil {
		fo.Close()
		return nil, nil, err
	}
	return fo, fe, nil
}

// wordsKeeper keeps each rank's most telling stderr line (failure.go's
// rules), for the report of a failing rank.
type wordsKeeper struct {
	mu   sync.Mutex
	scan *failureScanner
}

func (k *wordsKeeper) note(rank int, line string) {
	k.mu.Lock()
	k.scan.note(rank, line)
	k.mu.Unlock()
}

func (k *wordsKeeper) last(rank int) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.scan.words[rank].text
}

// prefixWriter writes each line of a worker's output to w, after prefix
// (Open MPI's --tag-output form, "[1,R]<stdout>:"), whole lines at a time
// under mu, so that the workers' lines do not mix.
type prefixWriter struct {
	w      io.Writer
	mu     *sync.Mutex
	prefix string
	onLine func(string)
	buf    []byte
}

func newPrefixWriter(w io.Writer, mu *sync.Mutex, prefix string, onLine func(string)) *prefixWriter {
	return &prefixWriter{w: w, mu: mu, prefix: prefix, onLine: onLine}
}

// Write implements io.Writer. It never fails: output that cannot be
// written is dropped, and the worker goes on.
func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.line(string(p.buf[:i]))
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > 1<<16 { // a very long line: pass it on in pieces
		p.line(string(p.buf))
		p.buf = p.buf[:0]
	}
	return len(b), nil
}

func (p *prefixWriter) line(s string) {
	if p.onLine != nil {
		p.onLine(s)
	}
	p.mu.Lock()
	_, _ = io.WriteString(p.w, p.prefix+s+"\n")
	p.mu.Unlock()
}

// Flush writes a last line that has no newline.
func (p *prefixWriter) Flush() {
	if len(p.buf) > 0 {
		p.line(string(p.buf))
		p.buf = nil
	}
}
