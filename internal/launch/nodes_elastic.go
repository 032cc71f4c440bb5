package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gohorovod/gohorovod/internal/launch/elastic"
	"github.com/gohorovod/gohorovod/internal/sockdir"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// An elastic multi-node job (--nnodes MIN:MAX) runs horovodrun's elastic
// driver (internal/launch/elastic) in node 0's launcher: the nodes whose
// launchers have met node 0 are its hosts (a node that arrives is a
// discovered host, one whose launcher is gone a lost host, whose workers
// failed), and the driver's decisions to start or stop a worker on another
// node travel to that node's launcher, which starts it and reports its end.
// The worker's variables travel without the secret, which every launcher
// has; the rendezvous rounds are node 0's rendezvous.RoundServer.

// nodeWorkerRun asks a node's launcher to start the worker of a local rank
// with these variables (runtime/config's, less the secret and the socket
// directory, which the node adds), or to signal it.
type nodeWorkerRun struct {
	Local  int
	Env    []string `json:",omitempty"`
	Signal int      `json:",omitempty"`
}

// nodeWorkerExit is a node's report of a worker's end.
type nodeWorkerExit struct {
	Local  int
	Status int
}

// remoteExitError is a worker of another node that ended with Status.
type remoteExitError struct{ Status int }

func (e *remoteExitError) Error() string { return "exit status " + strconv.Itoa(e.Status) }

// elasticNodes is node 0's side of an elastic multi-node job.
type elasticNodes struct {
	l     *Launcher
	n     Nodes
	key   []byte
	me    string // node 0's name
	ln    net.Listener
	port  int         // the workers' RoundServer
	job   *elasticJob // set before meet starts
	mu    sync.Mutex
	over  bool                   // finish was called
	nodes map[string]*memberNode // by name
}

// memberNode is another node's launcher, as node 0 sees it.
type memberNode struct {
	rank  int
	name  string
	nc    *nodeConn
	procs map[int]*elasticProc // running workers by local rank
	gone  bool
	// dropped: node 0 dropped it (drop), which said so; its connection's
	// end is no news.
	dropped bool
}

// hosts is the driver's view: node 0 and every node present.
func (en *elasticNodes) hosts() []elastic.Host {
	en.mu.Lock()
	defer en.mu.Unlock()
	hs := []elastic.Host{{Name: en.me, Slots: en.n.PerNode}}
	byRank := make([]*memberNode, en.n.N)
	for _, m := range en.nodes {
		if !m.gone {
			byRank[m.rank] = m
		}
	}
	for _, m := range byRank {
		if m != nil {
			hs = append(hs, elastic.Host{Name: m.name, Slots: en.n.PerNode})
		}
	}
	return hs
}

// meet admits nodes until ctx ends, and reports every change of the nodes
// to the driver.
func (en *elasticNodes) meet(ctx context.Context, events chan<- elastic.Event) {
	send := func(ev elastic.Event) {
		select {
		case events <- ev:
		case <-ctx.Done():
		}
	}
	send(elastic.Discovered{Hosts: en.hosts()})
	go func() { <-ctx.Done(); en.ln.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := en.ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := en.admit(c)
			if m == nil {
				return
			}
			fmt.Fprintf(en.l.Stderr, "gohorovodrun: elastic: node %d (host %s) joined\n", m.rank, m.name)
			send(elastic.Discovered{Hosts: en.hosts()})
			err := en.watch(m)
			en.mu.Lock()
			m.gone = true
			var lost []*elasticProc
			for _, p := range m.procs {
				lost = append(lost, p)
			}
			m.procs = nil
			over, dropped := en.over, m.dropped
			en.mu.Unlock()
			if ctx.Err() != nil || over {
				return
			}
			if dropped {
				send(elastic.Discovered{Hosts: en.hosts()})
				return
			}
			fmt.Fprintf(en.l.Stderr, "gohorovodrun: elastic: node %d (host %s) is gone (%v)\n", m.rank, m.name, err)
			// Its workers are lost with it, as a lost host's over ssh.
			for _, p := range lost {
				en.job.exits <- elasticExit{p, &remoteExitError{Status: 255}}
			}
			send(elastic.Discovered{Hosts: en.hosts()})
		}()
	}
}

// admit runs the handshake and the hello of a node's launcher, and
// answers it with its name and the rendezvous port; nil when refused.
func (en *elasticNodes) admit(c net.Conn) *memberNode {
	nc, h, ok := acceptNode(c, en.key, en.n.LinkSilence, en.l.Stderr)
	if !ok {
		return nil
	}
	name := nodeName(h.Host, h.NodeRank)
	var refuse string
	en.mu.Lock()
	switch {
	case h.NNodes != en.n.N || h.PerNode != en.n.PerNode:
		refuse = fmt.Sprintf("this node says %d nodes at most of %d workers, node 0 says %d of %d", h.NNodes, h.PerNode, en.n.N, en.n.PerNode)
	case h.NodeRank <= 0 || h.NodeRank >= en.n.N:
		refuse = fmt.Sprintf("node rank %d is not one of 1 to %d", h.NodeRank, en.n.N-1)
	case en.nodes[name] != nil && !en.nodes[name].gone:
		refuse = fmt.Sprintf("node rank %d is already in the job", h.NodeRank)
	}
	var m *memberNode
	if refuse == "" {
		m = &memberNode{rank: h.NodeRank, name: name, nc: nc, procs: map[int]*elasticProc{}}
		en.nodes[name] = m
	}
	en.mu.Unlock()
	if refuse != "" {
		fmt.Fprintf(en.l.Stderr, "gohorovodrun: refused the launcher at %s: %s\n", c.RemoteAddr(), refuse)
		_ = nc.send(nodeMsg{Refused: refuse})
		c.Close()
		return nil
	}
	if err := nc.send(nodeMsg{Start: &nodeStart{Labels: []string{name}, RendezvousPort: en.port}}); err != nil {
		c.Close()
		en.mu.Lock()
		m.gone = true
		en.mu.Unlock()
		return nil
	}
	return m
}

// nodeName names a node of an elastic job: its host name and node rank,
// so that a node that comes back is the same host to the driver.
func nodeName(host string, rank int) string {
	if host == "" {
		host = "node"
	}
	return host + "-node" + strconv.Itoa(rank)
}

// watch reads a node's reports of its workers' ends until its connection
// ends.
func (en *elasticNodes) watch(m *memberNode) error {
	for {
		msg, err := m.nc.recv()
		if err != nil {
			return err
		}
		if x := msg.Exited; x != nil {
			en.mu.Lock()
			p := m.procs[x.Local]
			delete(m.procs, x.Local)
			en.mu.Unlock()
			if p != nil {
				var err error
				if x.Status != 0 {
					err = &remoteExitError{Status: x.Status}
				}
				en.job.exits <- elasticExit{p, err}
			}
		}
	}
}

// start asks the node of slot s to start its worker w (planned by node 0
// as if local: its variables less the secret and the socket directory).
func (en *elasticNodes) start(s elastic.Slot, w GlooWorker) error {
	en.mu.Lock()
	m := en.nodes[s.Host]
	en.mu.Unlock()
	if m == nil || m.gone {
		return fmt.Errorf("elastic: no launcher on node %s to start %v", s.Host, s)
	}
	var env []string
	for _, kv := range w.Env {
		k, _, _ := strings.Cut(kv, "=")
		if k == config.EnvSecret || k == config.EnvGlooSocketDir || k == config.EnvLauncher {
			continue
		}
		if knownConfigVar(k) {
			env = append(env, kv)
		}
	}
	p := &elasticProc{slot: s, w: GlooWorker{Slot: w.Slot, Remote: true}}
	en.mu.Lock()
	m.procs[s.Local] = p
	en.mu.Unlock()
	en.job.procs[s] = p
	if err := m.nc.send(nodeMsg{Run: &nodeWorkerRun{Local: s.Local, Env: env}}); err != nil {
		// The node is going: its watcher reports the worker lost.
		fmt.Fprintf(en.l.Stderr, "gohorovodrun: elastic: cannot reach node %s to start %v: %v\n", s.Host, s, err)
	}
	return nil
}

func knownConfigVar(k string) bool {
	for _, n := range config.Names() {
		if n == k {
			return true
		}
	}
	return false
}

// signal asks the node of p to signal its worker.
func (en *elasticNodes) signal(p *elasticProc, sig syscall.Signal) {
	en.mu.Lock()
	m := en.nodes[p.slot.Host]
	en.mu.Unlock()
	if m != nil && !m.gone {
		_ = m.nc.send(nodeMsg{Run: &nodeWorkerRun{Local: p.slot.Local, Signal: int(sig)}})
	}
}

// killConfirm is how long node 0 waits for another node's launcher to
// report the end of a worker it was told to kill as frozen. A node that
// can be reached reports it within milliseconds, or within the 2 s a
// worker's output pipes are given to close (WaitDelay) where something of
// the worker's kept them open; one that does not is cut
// off as far as the job can tell (its link silent, or its launcher
// stuck), since the workers' heartbeats already found its worker silent.
// Node 0 then drops the node: its workers count as lost at once (their
// hosts blacklisted, as a failed worker's is) and the job re-forms without
// it, instead of waiting for the node's connection to break, which takes
// the launchers' link silence (Nodes.LinkSilence) and TCP's retransmission
// backoff on top of the heartbeats.
const killConfirm = 5 * time.Second

// awaitKill gives the node of p, just told to kill it, d to report its
// end; past d, node 0 drops the node (drop). Whether the report came and
// the node's removal are decided under one lock, so that a report that
// comes at the last moment either counts or is not heard.
func (en *elasticNodes) awaitKill(p *elasticProc, d time.Duration) {
	time.AfterFunc(d, func() {
		en.mu.Lock()
		m := en.nodes[p.slot.Host]
		if m == nil || en.over || m.gone || m.procs[p.slot.Local] != p {
			en.mu.Unlock()
			return
		}
		m.gone, m.dropped = true, true
		var lost []*elasticProc
		for _, q := range m.procs {
			lost = append(lost, q)
		}
		m.procs = nil
		en.mu.Unlock()
		en.drop(m, lost, fmt.Sprintf("it did not report within %v that %v, declared frozen by the job, was killed (its link may be down)", d, p.slot))
	})
}

// drop tells the job that node m, already marked gone and dropped, is out
// for reason: its workers lost are reported (status 255, as a lost host's),
// its launcher is told why (if its link comes back) and its connection
// closed; what it reports later is not heard.
func (en *elasticNodes) drop(m *memberNode, lost []*elasticProc, reason string) {
	fmt.Fprintf(en.l.Stderr, "gohorovodrun: elastic: dropped node %d (host %s): %s; the job goes on without it\n", m.rank, m.name, reason)
	for _, p := range lost {
		select {
		case en.job.exits <- elasticExit{p, &remoteExitError{Status: 255}}:
		case <-en.job.release:
			return
		}
	}
	// Half-closed, so that what the node sends meanwhile (its reports,
	// arriving when its link comes back) waits unread rather than being
	// answered with a reset that could overtake the reason; finish closes
	// it for good. Its watcher stops reading now, and tells the driver the
	// hosts without it, so that no worker is planned there again.
	_ = m.nc.send(nodeMsg{Dropped: reason})
	if tc, ok := m.nc.c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
		_ = m.nc.c.SetReadDeadline(time.Now())
	} else {
		m.nc.c.Close()
	}
}

// finish tells every node the job's end (Done, or Failed with err), and
// closes every connection, a dropped node's too.
func (en *elasticNodes) finish(err error) {
	en.mu.Lock()
	defer en.mu.Unlock()
	en.over = true
	for _, m := range en.nodes {
		if !m.gone {
			msg := nodeMsg{Done: true}
			if err != nil {
				msg = nodeMsg{Failed: err.Error(), FailedNode: 0, FailedHost: en.me}
			}
			_ = m.nc.send(msg)
		}
		m.nc.c.Close()
	}
}

// runElasticMaster is node 0 of an elastic multi-node job.
func (l *Launcher) runElasticMaster(ctx context.Context, o *Options, spec Spec, n Nodes, key []byte, host string) error {
	lc := net.ListenConfig{KeepAlive: nodeKeepAlive}
	ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(n.MasterPort))
	if err != nil {
		return fmt.Errorf("node 0 cannot listen on port %d (--master-port) for the other nodes: %w", n.MasterPort, err)
	}
	defer ln.Close()
	fmt.Fprintf(l.Stderr, "gohorovodrun: elastic: node 0 of %d to %d: nodes join on port %d\n", n.Min, n.N, n.MasterPort)
	me := nodeName(host, 0)
	en := &elasticNodes{l: l, n: n, key: key, me: me, ln: ln, nodes: map[string]*memberNode{}}
	ecfg, err := o.ElasticConfig(l.Environ)
	if err != nil {
		return err
	}
	ecfg.NP, ecfg.MinNP, ecfg.MaxNP = n.Min*n.PerNode, n.Min*n.PerNode, n.N*n.PerNode
	spec.Hosts = []Host{{Name: me, Slots: n.PerNode}}
	spec.NP = n.PerNode
	spec.IsLocal = func(h string) bool { return h == me }
	return l.runElasticWith(ctx, o, spec, ecfg, en)
}

// elasticMemberRun is the run path of a node other than 0 of an elastic
// multi-node job: it starts and signals its workers as node 0 asks, and
// reports their ends, until node 0 closes the meeting. Its plan is joining node 0; it watches node 0's words,
// which start and signal its workers, and reports their ends.
type elasticMemberRun struct {
	nodeBase

	nc           *nodeConn
	name         string // this node's name in the job
	base         []string
	outMu, errMu sync.Mutex
	procs        map[int]*exec.Cmd // running workers by local rank
	exits        chan nodeWorkerExit
	msgs         chan nodeMsg
	lost         chan error
	release      chan struct{}

	result   error
	ending   bool
	finished bool      // node 0 said the job ended well (Done)
	stop     graceStop // after node 0 is lost
}

// forwards is false: node 0 passes a stop signal on (nodeWorkerRun).
func (r *elasticMemberRun) forwards() bool { return false }

func (r *elasticMemberRun) plan(ctx context.Context, td *teardown) error {
	l, n := r.l, r.n
	nc, err := l.joinMaster(ctx, n, r.key, r.host, r.timeout)
	if err != nil {
		return err
	}
	r.nc = nc
	td.add(func() { nc.c.Close() })
	first, err := nc.recv()
	switch {
	case err != nil:
		return &NodeError{NodeRank: 0, Host: n.MasterAddr, Err: fmt.Errorf("its launcher closed the meeting before this node could join (%v)", err)}
	case first.Refused != "":
		return usagef("node %d: node 0 at %s refused this node: %s", n.Rank, n.Master(), first.Refused)
	case first.Start == nil || len(first.Start.Labels) != 1:
		return fmt.Errorf("node %d: node 0 sent a malformed start", n.Rank)
	}
	r.name = first.Start.Labels[0]
	fmt.Fprintf(l.Stderr, "gohorovodrun: elastic: node %d joined node 0 at %s as %s\n", n.Rank, n.Master(), r.name)
	if r.spec.SocketDir, err = jobSocketDir(l.Environ); err != nil {
		return err
	}
	dir := r.spec.SocketDir
	td.add(func() { sockdir.Remove(dir) })
	return nil
}

// start reads node 0's messages until the meeting ends.
func (r *elasticMemberRun) start(_ context.Context, td *teardown) error {
	r.base, _ = glooBase(r.spec)
	r.procs = map[int]*exec.Cmd{}
	r.exits = make(chan nodeWorkerExit, 16)
	r.msgs = make(chan nodeMsg)
	r.lost = make(chan error, 1)
	go func() {
		for {
			m, err := r.nc.recv()
			if err != nil {
				r.lost <- err
				return
			}
			r.msgs <- m
		}
	}()
	r.release = make(chan struct{})
	td.add(func() { close(r.release) })
	return nil
}

func (r *elasticMemberRun) watch(ctx context.Context, _ *watching) error {
	lost := r.lost
	for !r.ending || len(r.procs) > 0 {
		select {
		case m := <-r.msgs:
			r.told(m)
		case x := <-r.exits:
			delete(r.procs, x.Local)
			if !r.ending {
				_ = r.nc.send(nodeMsg{Exited: &x})
			}
		case err := <-lost:
			lost = nil
			if !r.ending {
				r.ending = true
				if r.result == nil && (len(r.procs) > 0 || !r.finished) {
					// Node 0 may go on without this node (its link may
					// be what failed): say what this node knows.
					stopped := ""
					if len(r.procs) > 0 {
						stopped = "; this node's workers were stopped"
					}
					r.result = fmt.Errorf("node %d: lost node 0's launcher at %s (%v)%s", r.n.Rank, r.n.Master(), err, stopped)
				}
				r.signalAll(syscall.SIGTERM)
				r.stop.begin(WorkerStopGrace)
			}
		case <-r.stop.kill:
			r.stop.kill = nil
			r.signalAll(syscall.SIGKILL)
		case <-ctx.Done():
			ctx = context.Background()
			if !r.ending {
				r.ending = true
				r.result = ErrInterrupted
				r.signalAll(syscall.SIGTERM)
				r.nc.c.Close()
			}
		}
	}
	return r.result
}

// told does what node 0 says: signal a worker, start one, the job's end
// or failure, or that the job goes on without this node.
func (r *elasticMemberRun) told(m nodeMsg) {
	switch {
	case m.Run != nil && m.Run.Signal != 0:
		if c := r.procs[m.Run.Local]; c != nil {
			_ = c.Process.Signal(syscall.Signal(m.Run.Signal))
			signalGroup(c.Process.Pid, syscall.Signal(m.Run.Signal))
		}
	case m.Run != nil && !r.ending:
		r.startWorker(m.Run)
	case m.Failed != "":
		r.result = &NodeError{NodeRank: m.FailedNode, Host: m.FailedHost, Err: errors.New(m.Failed)}
	case m.Done:
		r.finished = true
	case m.Dropped != "":
		r.result = fmt.Errorf("node %d: node 0 dropped this node from the job: %s", r.n.Rank, m.Dropped)
	}
}

// startWorker starts the worker node 0 asks for, with node 0's variables
// and this node's secret and directory; a worker that cannot start is
// reported ended with status 127.
func (r *elasticMemberRun) startWorker(run *nodeWorkerRun) {
	l, spec := r.l, r.spec
	env := append(append(append([]string(nil), r.base...), run.Env...),
		config.EnvSecret+"="+string(spec.Secret), config.EnvGlooSocketDir+"="+spec.SocketDir)
	if spec.Launcher != "" {
		env = append(env, config.EnvLauncher+"="+spec.Launcher)
	}
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = workerProcAttr(true)
	cmd.WaitDelay = 2 * time.Second
	tag := fmt.Sprintf("[%s[%d]]", r.name, run.Local)
	stdout := newPrefixWriter(l.Stdout, &r.outMu, tag+"<stdout>:", nil)
	stderr := newPrefixWriter(l.Stderr, &r.errMu, tag+"<stderr>:", nil)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	local := run.Local
	if err := startLocked(cmd, r.release); err != nil {
		fmt.Fprintf(l.Stderr, "gohorovodrun: elastic: starting the worker of local rank %d: %v\n", local, err)
		_ = r.nc.send(nodeMsg{Exited: &nodeWorkerExit{Local: local, Status: 127}})
		return
	}
	r.procs[local] = cmd
	go func() {
		err := cmd.Wait()
		stdout.Flush()
		stderr.Flush()
		status := exitStatus(err)
		if status < 0 { // not the worker's status: it did not run to its end
			status = 1
		}
		r.exits <- nodeWorkerExit{Local: local, Status: status}
	}()
}

// signalAll sends sig to every worker of this node, and its process
// group.
func (r *elasticMemberRun) signalAll(sig syscall.Signal) {
	for _, c := range r.procs {
		_ = c.Process.Signal(sig)
		signalGroup(c.Process.Pid, sig)
	}
}
