package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/secret"
	"github.com/gohorovod/gohorovod/internal/launch/elastic"
	"github.com/gohorovod/gohorovod/internal/sockdir"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// elasticTick is how often the elastic driver checks its deadlines and
// cooldowns, and retries a host update the coordinator could not be told
// yet.
const elasticTick = 200 * time.Millisecond

// elasticProc is one worker process of an elastic job.
type elasticProc struct {
	slot     elastic.Slot
	w        GlooWorker
	cmd      *exec.Cmd
	out      []*prefixWriter
	files    []*os.File // --output-filename
	stopping bool
	exited   bool
}

// elasticExit is a worker process's end.
type elasticExit struct {
	p   *elasticProc
	err error
}

// runElastic runs an elastic job (horovodrun's elastic driver): hosts from
// the discovery script (every DiscoveryInterval) or -H, workers started and
// stopped as the driver (internal/launch/elastic) decides, and rendezvous
// rounds on a rendezvous.RoundServer that proves the job's secret. It
// returns nil when the job succeeded, the driver's error when it ended
// otherwise, and ErrInterrupted when ctx ended first.
func (l *Launcher) runElastic(ctx context.Context, o *Options, spec Spec) error {
	ecfg, err := o.ElasticConfig(l.Environ)
	if err != nil {
		return err
	}
	return l.runElasticWith(ctx, o, spec, ecfg, nil)
}

// runElasticWith is runElastic with the driver's configuration ecfg; with
// nodes (a multi-node elastic job, this launcher node 0's) the hosts are
// the nodes whose launchers have met this one, and their workers are
// started by their own launchers.
func (l *Launcher) runElasticWith(ctx context.Context, o *Options, spec Spec, ecfg elastic.Config, nodes *elasticNodes) error {
	return l.drive(ctx, &elasticRun{l: l, o: o, spec: spec, ecfg: ecfg, nodes: nodes})
}

// elasticRun is the run path of an elastic job: its plan is the job's
// secret, directory and rendezvous rounds; it starts the discovery of
// hosts (or the nodes' meeting), and watches the job as the driver
// starts and stops workers (elasticJob).
type elasticRun struct {
	l     *Launcher
	o     *Options
	spec  Spec
	ecfg  elastic.Config
	nodes *elasticNodes

	srv    *rendezvous.RoundServer
	drv    *elastic.Driver
	events chan elastic.Event
	frozen chan elastic.Slot
	job    *elasticJob
}

func (r *elasticRun) forwards() bool { return true }

func (r *elasticRun) plan(_ context.Context, td *teardown) error {
	l, o := r.l, r.o
	var err error
	if _, err := elastic.New(r.ecfg, time.Now()); err != nil {
		return usagef("%v", err)
	}
	if o.DryRun || o.Verbose {
		for _, line := range describeElastic(o, r.ecfg, r.spec) {
			fmt.Fprintln(l.Stdout, line)
		}
	}
	if o.DryRun {
		return errNothingToRun
	}
	// The workers at most (--max-np, else -np; a larger uncapped job is
	// checked by nothing here), all counted as remote.
	if n := max(r.ecfg.NP, r.ecfg.MaxNP); n > 0 {
		if err := ensureFiles(n, n, o.OutputFilename != ""); err != nil {
			return err
		}
	}
	if r.spec.Secret == "" {
		secret, err := secret.New()
		if err != nil {
			return err
		}
		r.spec.Secret = config.Secret(secret)
	}
	if r.spec.SocketDir, err = jobSocketDir(l.Environ); err != nil {
		return err
	}
	dir := r.spec.SocketDir
	td.add(func() { sockdir.Remove(dir) })
	// The workers come and go, and watch the launcher themselves; the
	// guard removes the job's directory if the launcher is killed.
	l.guardJob(td, nil, []string{dir}, "", func(err error) string {
		return fmt.Sprintf("no guard for the job's directory %s (%v): if gohorovodrun is killed, it stays", dir, err)
	})
	if err := r.serve(td); err != nil {
		return err
	}
	if r.drv, err = elastic.New(r.ecfg, time.Now()); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// serve serves the job's rendezvous rounds, which report the workers
// ready and frozen as events.
func (r *elasticRun) serve(td *teardown) error {
	key, err := r.spec.Secret.Bytes()
	if err != nil {
		return err
	}
	// Listen on every interface when remote hosts may join (a discovery
	// script, or a remote -H host), else on the loopback only.
	listen := "127.0.0.1:0"
	if r.o.HostDiscoveryScript != "" || r.nodes != nil {
		listen = ":0"
	} else if _, l, err := rendezvousHost(r.spec); err == nil {
		listen = l
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("the rendezvous server cannot listen on %s: %w", listen, err)
	}
	td.add(func() { ln.Close() })
	r.spec.RendezvousPort = ln.Addr().(*net.TCPAddr).Port
	srv, err := rendezvous.NewRoundServer(key)
	if err != nil {
		return err
	}
	r.srv = srv
	r.events = make(chan elastic.Event, 64)
	srv.OnReady = func(s rendezvous.Slot) {
		r.events <- elastic.Ready{Slot: elastic.Slot{Host: s.Host, Local: s.LocalRank}}
	}
	r.frozen = make(chan elastic.Slot, 64)
	srv.OnFrozen = func(s rendezvous.Slot) {
		select {
		case r.frozen <- elastic.Slot{Host: s.Host, Local: s.LocalRank}:
		default: // a report of the same worker is already waiting
		}
	}
	srv.Logf = r.l.logf
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	td.add(func() { srv.Close(); <-served })
	return nil
}

// start starts the discovery of hosts: the script's, every
// DiscoveryInterval, -H's once, or the nodes' meeting.
func (r *elasticRun) start(ctx context.Context, td *teardown) error {
	o, spec := r.o, r.spec
	dctx, stopDiscovery := context.WithCancel(ctx)
	td.add(stopDiscovery)
	var discovering sync.WaitGroup
	if r.nodes != nil {
		// The nodes' meeting is the discovery: started below, once the
		// job is there to start their workers.
	} else if o.HostDiscoveryScript != "" {
		discovering.Add(1)
		go func() { defer discovering.Done(); r.discover(dctx) }()
	} else {
		hosts := make([]elastic.Host, len(spec.Hosts))
		for i, h := range spec.Hosts {
			hosts[i] = elastic.Host{Name: h.Name, Slots: h.Slots}
		}
		r.events <- elastic.Discovered{Hosts: hosts}
	}
	td.add(discovering.Wait)
	td.add(stopDiscovery)
	e := &elasticJob{l: r.l, spec: spec, srv: r.srv, drv: r.drv, procs: map[elastic.Slot]*elasticProc{}, frozen: r.frozen, outDir: o.OutputFilename,
		exits: make(chan elasticExit, 16), release: make(chan struct{})}
	e.base, e.remoteBase = glooBase(spec)
	r.job = e
	td.add(func() { close(e.release) })
	if nodes := r.nodes; nodes != nil {
		e.nodes = nodes
		nodes.job = e
		nodes.port = spec.RendezvousPort
		discovering.Add(1)
		go func() { defer discovering.Done(); nodes.meet(dctx, r.events) }()
	}
	return nil
}

// discover runs the discovery script every DiscoveryInterval until ctx
// ends.
func (r *elasticRun) discover(ctx context.Context) {
	for {
		ev := RunDiscovery(ctx, r.o.HostDiscoveryScript, r.o.SlotsPerHost)
		if ctx.Err() != nil {
			return
		}
		select {
		case r.events <- ev:
		case <-ctx.Done():
			return
		}
		select {
		case <-time.After(DiscoveryInterval):
		case <-ctx.Done():
			return
		}
	}
}

func (r *elasticRun) watch(ctx context.Context, w *watching) error {
	err := r.job.loop(ctx, r.events, w)
	if r.nodes != nil {
		r.nodes.finish(err)
	}
	return err
}

// elasticJob is the launcher's side of a running elastic job.
type elasticJob struct {
	l                *Launcher
	spec             Spec
	base, remoteBase []string
	srv              *rendezvous.RoundServer
	drv              *elastic.Driver
	procs            map[elastic.Slot]*elasticProc // running (or stopping) workers
	frozen           chan elastic.Slot             // workers the job reported frozen
	exits            chan elasticExit
	release          chan struct{} // closed at the end: unlocks the threads that started workers
	outMu, errMu     sync.Mutex
	outDir           string                 // --output-filename: DIR/host[local]/{stdout,stderr}
	seq              int                    // host updates sent
	pending          *rendezvous.HostUpdate // an update rank 0 could not be told yet
	nodes            *elasticNodes          // a multi-node job's other nodes, or nil

	done        bool  // the job is ending: no more decisions
	result      error // the driver's reason for ending it
	interrupted bool
	stop        graceStop
}

// loop feeds the driver its events and carries out its decisions until
// the job has ended and every worker has exited.
func (e *elasticJob) loop(ctx context.Context, events chan elastic.Event, w *watching) error {
	tick := time.NewTicker(elasticTick)
	defer tick.Stop()
	for !e.done || len(e.procs) > 0 {
		var ev elastic.Event
		select {
		case ev = <-events:
		case x := <-e.exits:
			ev = e.exited(x, w.pre)
		case s := <-e.frozen:
			e.freeze(s)
			continue
		case <-tick.C:
			ev = elastic.Tick{}
			if e.pending != nil && e.srv.Notify(e.coordinator(), *e.pending) == nil {
				e.pending = nil
			}
		case <-ctx.Done():
			if !e.done {
				e.interrupted, e.done = true, true
				e.stopWorkers()
			}
			ctx = context.Background() // seen once
			continue
		case sig := <-w.signals:
			if !e.done {
				e.done = true
				e.forwardAll(sig.(syscall.Signal))
			}
			continue
		case <-e.stop.kill:
			e.stopAll(syscall.SIGKILL)
			e.stop.kill = nil
			continue
		}
		if e.done || ev == nil {
			continue
		}
		e.decide(ev)
	}
	if ok, err := w.verdict(e.interrupted, nil); ok {
		return err
	}
	if e.result != nil {
		return &ElasticError{Err: e.result, Resets: e.drv.Resets()}
	}
	return nil
}

// exited takes a worker's end: the driver's event, or nil when its end
// does not count.
func (e *elasticJob) exited(x elasticExit, pre *preemption) elastic.Event {
	x.p.exited = true
	if e.procs[x.p.slot] == x.p {
		delete(e.procs, x.p.slot)
	}
	if !x.p.stopping && pre.exited(exitStatus(x.err)) || pre.preempting() {
		// Preempted: the job ends; the driver starts no worker again,
		// and the others stop by themselves.
		e.done = true
		return nil
	}
	if x.p.stopping || e.done {
		return nil // a worker the driver let go: its status does not count
	}
	if e.inRound(x.p.slot) {
		// A round that had not formed yet cannot form without it: its
		// other members ask for the next one.
		e.srv.Break()
	}
	return exitEvent(x)
}

// freeze kills a worker the job declared frozen: a frozen worker never
// exits by itself, SIGKILL works on a stopped process, and its exit is
// then a failure like any other, from which the job re-forms.
func (e *elasticJob) freeze(s elastic.Slot) {
	if p := e.procs[s]; p != nil && !p.exited {
		fmt.Fprintf(e.l.Stderr, "gohorovodrun: elastic: %v was declared frozen by the job: killing it\n", s)
		e.signal(p, syscall.SIGKILL)
		if p.cmd == nil && e.nodes != nil {
			e.nodes.awaitKill(p, killConfirm)
		}
	}
}

// decide feeds the driver ev and carries out its decision.
func (e *elasticJob) decide(ev elastic.Event) {
	dec := e.drv.Step(time.Now(), ev)
	if err := e.apply(dec); err != nil && !dec.Done {
		// Starting a worker failed: the job cannot go on as planned.
		dec = elastic.Decision{Done: true, Err: err}
	}
	if dec.Done {
		e.done, e.result = true, dec.Err
		e.stopWorkers()
	}
}

// stopWorkers stops every worker: SIGTERM, SIGKILL after
// WorkerStopGrace.
func (e *elasticJob) stopWorkers() {
	e.stopAll(syscall.SIGTERM)
	e.stop.begin(WorkerStopGrace)
}

// ElasticError is the end of an elastic job that did not succeed: the
// driver's reason (a *elastic.ResetLimitError, *elastic.WorkersFailedError,
// *elastic.BlacklistedError, *elastic.TimeoutError, *elastic.DiscoveryError,
// ...).
type ElasticError struct {
	Err    error
	Resets int
}

// Error implements the error interface.
func (e *ElasticError) Error() string {
	return fmt.Sprintf("elastic job failed after %d resets: %v", e.Resets, e.Err)
}

// Unwrap returns the driver's reason.
func (e *ElasticError) Unwrap() error { return e.Err }

// exitEvent turns a worker's end into the driver's event.
func exitEvent(x elasticExit) elastic.Event {
	if x.err == nil {
		return elastic.Succeeded{Slot: x.p.slot}
	}
	status := 1
	var ee *exec.ExitError
	var re *remoteExitError
	if errors.As(x.err, &re) {
		status = re.Status
	} else if errors.As(x.err, &ee) {
		status = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = 128 + int(ws.Signal())
		}
	}
	return elastic.Failed{Slot: x.p.slot, Status: status}
}

// inRound reports whether s is a member of the current round.
func (e *elasticJob) inRound(s elastic.Slot) bool {
	for _, i := range e.drv.Assignment() {
		if i.Slot == s {
			return true
		}
	}
	return false
}

// coordinator is rank 0's slot in the current round.
func (e *elasticJob) coordinator() rendezvous.Slot {
	a := e.drv.Assignment()
	if len(a) == 0 {
		return rendezvous.Slot{}
	}
	return rendezvous.Slot{Host: a[0].Host, LocalRank: a[0].Local}
}

// apply carries out a decision: a new round first (so that its new
// workers find it), then the workers to stop and to start, then the host
// update for rank 0.
func (e *elasticJob) apply(dec elastic.Decision) error {
	if dec.Round != nil {
		slots := make([]rendezvous.Slot, len(dec.Round.Slots))
		names := make([]string, len(dec.Round.Slots))
		for i, s := range dec.Round.Slots {
			slots[i] = rendezvous.Slot{Host: s.Host, LocalRank: s.Local}
			names[i] = s.Slot.String()
		}
		if err := e.srv.StartRound(dec.Round.ID, slots); err != nil {
			return err
		}
		e.pending = nil // the new round starts from the hosts as they are
		fmt.Fprintf(e.l.Stderr, "gohorovodrun: elastic: rendezvous round %d: %d workers: %s\n",
			dec.Round.ID, len(slots), strings.Join(names, " "))
	}
	for _, s := range dec.Stop {
		if p := e.procs[s]; p != nil && !p.exited {
			p.stopping = true
			e.signal(p, syscall.SIGTERM)
			go func() {
				time.Sleep(WorkerStopGrace)
				if !p.exited {
					e.signal(p, syscall.SIGKILL)
				}
			}()
		}
	}
	for _, s := range dec.Start {
		if err := e.start(s); err != nil {
			return err
		}
	}
	if dec.Notify != elastic.NoUpdate {
		e.seq++
		u := rendezvous.HostUpdate{Seq: e.seq, Added: dec.Notify&elastic.Added != 0, Removed: dec.Notify&elastic.Removed != 0}
		fmt.Fprintf(e.l.Stderr, "gohorovodrun: elastic: hosts %s: telling rank 0 (%v)\n", dec.Notify, e.coordinator())
		if err := e.srv.Notify(e.coordinator(), u); err != nil {
			e.pending = &u // rank 0 has not joined yet: retried at every tick
		}
	}
	return nil
}

// start starts the worker of slot s: the rendezvous gives it its rank.
func (e *elasticJob) start(s elastic.Slot) error {
	spec := e.spec
	spec.RendezvousAddr = "127.0.0.1"
	if e.nodes != nil {
		// Every node's workers meet at node 0's address, and advertise
		// theirs on the route to it.
		spec.RendezvousAddr = e.nodes.n.MasterAddr
		spec.IsLocal = func(string) bool { return true }
	} else if spec.IsLocal == nil || !spec.IsLocal(s.Host) {
		iface := ""
		if len(spec.NICs) > 0 {
			iface = spec.NICs[0]
		}
		host, err := rendezvous.ListenHost("", iface, net.JoinHostPort(s.Host, "22"))
		if err != nil {
			return fmt.Errorf("cannot find this machine's address for the workers on %s: %w (give --network-interface)", s.Host, err)
		}
		spec.RendezvousAddr = host
	}
	cfg := spec.Config
	cfg.Elastic = true
	cfg.Rank, cfg.Size, cfg.LocalSize, cfg.CrossRank, cfg.CrossSize = config.Unset, config.Unset, config.Unset, config.Unset, config.Unset
	cfg.LocalRank = s.Local
	w := glooWorker(spec, cfg, Slot{Host: s.Host, LocalRank: s.Local}, e.base, e.remoteBase)
	if e.nodes != nil {
		if s.Host != e.nodes.me {
			return e.nodes.start(s, w)
		}
	}
	p := &elasticProc{slot: s, w: w}
	cmd := exec.Command(w.Argv[0], w.Argv[1:]...)
	cmd.Env = w.Env
	cmd.SysProcAttr = workerProcAttr(true)
	cmd.WaitDelay = 2 * time.Second
	tag := "[" + s.String() + "]"
	stdout := newPrefixWriter(e.l.Stdout, &e.outMu, tag+"<stdout>:", nil)
	stderr := newPrefixWriter(e.l.Stderr, &e.errMu, tag+"<stderr>:", nil)
	p.out = []*prefixWriter{stdout, stderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if e.outDir != "" {
		// One directory per slot; a slot's later workers append.
		dir := filepath.Join(e.outDir, s.String())
		fo, fe, err := openOutput(dir, true)
		if err != nil {
			return fmt.Errorf("--output-filename: %w", err)
		}
		p.files = []*os.File{fo, fe}
		cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, fo), io.MultiWriter(stderr, fe)
	}
	var stdin interface {
		Write([]byte) (int, error)
		Close() error
	}
	if w.Stdin != "" {
		in, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		stdin = in
	}
	if err := startLocked(cmd, e.release); err != nil {
		p.closeFiles()
		return fmt.Errorf("starting the worker of %v (%s): %w", s, w.Argv[0], err)
	}
	if stdin != nil {
		go func() { _, _ = stdin.Write([]byte(w.Stdin)) }()
	}
	p.cmd = cmd
	e.procs[s] = p
	go func() {
		err := cmd.Wait()
		for _, w := range p.out {
			w.Flush()
		}
		p.closeFiles()
		e.exits <- elasticExit{p, err}
	}()
	return nil
}

func (p *elasticProc) closeFiles() {
	for _, f := range p.files {
		f.Close()
	}
	p.files = nil
}

// describeElastic says what an elastic job will do, for --dry-run and
// --verbose: its shape, and the command and variables of each worker (the
// rendezvous gives the rank).
func describeElastic(o *Options, c elastic.Config, s Spec) []string {
	hosts := "-H " + o.Hosts
	switch {
	case o.HostDiscoveryScript != "":
		hosts = fmt.Sprintf("--host-discovery-script %s, every %v", o.HostDiscoveryScript, DiscoveryInterval)
	case o.Hostfile != "":
		hosts = "--hostfile " + o.Hostfile
	case o.Hosts == "":
		hosts = "-H localhost:" + fmt.Sprint(s.NP)
	}
	maxNP, limit, cooldown := "no cap", "none", "for good"
	if c.MaxNP > 0 {
		maxNP = fmt.Sprint(c.MaxNP)
	}
	if c.ResetLimit > 0 {
		limit = fmt.Sprint(c.ResetLimit)
	}
	if c.CooldownMin > 0 {
		cooldown = fmt.Sprintf("%v to %v", c.CooldownMin, c.CooldownMax)
	}
	minNP := c.MinNP
	if minNP == 0 {
		minNP = c.NP
	}
	spec := s
	spec.RendezvousAddr, spec.RendezvousPort, spec.Secret = "ADDR", 1, "00"
	cfg := s.Config
	cfg.Elastic = true
	w := glooWorker(spec, cfg, Slot{Host: "HOST", LocalRank: 0}, nil, nil)
	return []string{
		fmt.Sprintf("elastic job: -np %d, --min-np %d, --max-np %s; hosts from %s; elastic timeout %v; reset limit %s; blacklist %s",
			c.NP, minNP, maxNP, hosts, c.ElasticTimeout, limit, cooldown),
		"each worker: HOROVOD_ELASTIC=1 HOROVOD_HOSTNAME=<host> HOROVOD_LOCAL_RANK=<local rank>, the rendezvous gives its rank; " +
			"runs " + ShellQuote(w.Argv),
	}
}

// signal sends sig to a worker: its process group (local workers), or ssh.
func (e *elasticJob) signal(p *elasticProc, sig syscall.Signal) {
	if p.cmd == nil { // a worker of another node: its launcher signals it
		e.nodes.signal(p, sig)
		return
	}
	if err := p.cmd.Process.Signal(sig); err == nil && !p.w.Remote {
		signalGroup(p.cmd.Process.Pid, sig)
	}
}

// forwardAll passes a stop signal on, once, to the workers still
// running: a local one's process group, another node's through its
// launcher. A remote worker's ssh is left alone (it would end the worker,
// not pass the signal on): the ranks' agreement at the next step boundary
// stops it with the others; only when no other worker is left does its
// ssh get the signal.
func (e *elasticJob) forwardAll(sig syscall.Signal) {
	told := 0
	for _, p := range e.procs {
		switch {
		case p.exited || p.cmd != nil && p.w.Remote:
		case p.cmd == nil:
			e.nodes.signal(p, sig)
			told++
		default:
			signalGroup(p.cmd.Process.Pid, sig)
			told++
		}
	}
	for _, p := range e.procs {
		if told == 0 && !p.exited && p.cmd != nil {
			_ = p.cmd.Process.Signal(sig)
		}
	}
}

// stopAll sends sig to every worker still running.
func (e *elasticJob) stopAll(sig syscall.Signal) {
	for _, p := range e.procs {
		if !p.exited {
			e.signal(p, sig)
		}
	}
}
