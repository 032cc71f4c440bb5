package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/internal/job/secret"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// The launchers of a multi-node job meet at node 0 (MasterAddr:MasterPort)
// over TCP. Each connection starts with internal/job/secret's handshake
// over the job's secret, so the secret itself never travels and a process
// that does not know it is refused; then both ends write JSON messages
// (nodeMsg), one per line. A node sends its hello; node 0, once every node
// is there, answers each with the job (the nodes' names and the port of the
// workers' rendezvous, which it hosts); the connection then stays open
// until the job ends: a node reports its workers' end (done or failed),
// node 0 tells every node to stop when one fails, and a connection that
// breaks is a node (or node 0) that is gone.

// nodeKeepAlive is the TCP keep-alive period of the launchers'
// connections, so that a node that vanishes without closing them (a
// powered-off machine, a cut network) is noticed within a few periods.
const nodeKeepAlive = 5 * time.Second

// nodeBlameGrace is how long a launcher whose own workers failed waits for
// word of another node's failure, which would be the cause: a node whose
// launcher died takes its workers with it, and the other workers then
// fail on their broken connections.
const nodeBlameGrace = 2 * time.Second

type nodeHello struct {
	NodeRank int
	NNodes   int
	PerNode  int
	Host     string
}

type nodeStart struct {
	Labels         []string // by node rank
	RendezvousPort int
}

type nodeMsg struct {
	Hello *nodeHello `json:",omitempty"`
	Start *nodeStart `json:",omitempty"`
	// Refused: node 0 does not take this node (a wrong rank, a duplicate,
	// a different job size); the node ends with this text.
	Refused string `json:",omitempty"`
	// Done: from a node, its workers all ended well; Preempted with it:
	// they stopped when told to (ExitPreempted). From node 0 of an elastic
	// job, the job ended well (a node whose connection ends without this
	// word has lost node 0).
	Done      bool `json:",omitempty"`
	Preempted bool `json:",omitempty"`
	// Run and Exited: an elastic job's workers on another node, started
	// or signalled on node 0's word, and their ends.
	Run    *nodeWorkerRun  `json:",omitempty"`
	Exited *nodeWorkerExit `json:",omitempty"`
	// Dropped: from node 0 to a node of an elastic job, the job goes on
	// without this node, for this reason.
	Dropped string `json:",omitempty"`
	// Failed: from a node, its workers failed (the text says how); from
	// node 0, the job is stopped because of node FailedNode.
	Failed     string `json:",omitempty"`
	FailedNode int    `json:",omitempty"`
	FailedHost string `json:",omitempty"`
}

// nodeConn is one launcher's connection to another, messages in and out.
type nodeConn struct {
	c   net.Conn
	enc *json.Encoder
	dec *json.Decoder
	mu  sync.Mutex
}

// acceptNode runs node 0's side of a node launcher's connection up to its
// hello: the secret's handshake (a refusal is logged to stderr), then the
// hello within rendezvous.HandshakeTimeout. It closes c and reports false
// when either fails.
func acceptNode(c net.Conn, key []byte, silence time.Duration, stderr io.Writer) (*nodeConn, nodeHello, bool) {
	setKeepAlive(c, silence)
	if err := secret.Handshake(c, key, secret.Acceptor, rendezvous.HandshakeTimeout); err != nil {
		fmt.Fprintf(stderr, "gohorovodrun: refused a connection from %s: %v\n", c.RemoteAddr(), err)
		c.Close()
		return nil, nodeHello{}, false
	}
	nc := newNodeConn(c)
	_ = c.SetReadDeadline(time.Now().Add(rendezvous.HandshakeTimeout))
	msg, err := nc.recv()
	_ = c.SetReadDeadline(time.Time{})
	if err != nil || msg.Hello == nil {
		c.Close()
		return nil, nodeHello{}, false
	}
	return nc, *msg.Hello, true
}

func newNodeConn(c net.Conn) *nodeConn {
	return &nodeConn{c: c, enc: json.NewEncoder(c), dec: json.NewDecoder(io.LimitReader(c, 1<<24))}
}

func (n *nodeConn) send(m nodeMsg) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	_ = n.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return n.enc.Encode(m)
}

func (n *nodeConn) recv() (nodeMsg, error) {
	var m nodeMsg
	err := n.dec.Decode(&m)
	return m, err
}

// setKeepAlive makes c probe its peer after nodeKeepAlive of quiet, and
// break once the peer has answered nothing for silence (keep-alive probes
// unanswered, or data unacknowledged: TCP_USER_TIMEOUT where the system
// has it), so that a node whose network went silent, which sends no reset,
// is a node gone within silence rather than after the kernel's
// retransmissions, many minutes.
func setKeepAlive(c net.Conn, silence time.Duration) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	if silence <= 0 {
		_ = tc.SetKeepAlive(true)
		_ = tc.SetKeepAlivePeriod(nodeKeepAlive)
		return
	}
	_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: nodeKeepAlive, Interval: time.Second,
		Count: max(int((silence-nodeKeepAlive)/time.Second), 1)})
	setUserTimeout(tc, silence)
}

// nodesTimeout is how long the launchers wait for each other.
func (l *Launcher) nodesTimeout(o *Options) (time.Duration, error) {
	if o.StartTimeout > 0 {
		return seconds(o.StartTimeout), nil
	}
	if v, ok := config.Lookup(l.Environ)(EnvStartTimeout); ok && v != "" {
		return l.startTimeout(o)
	}
	return DefaultNodesTimeout, nil
}

// runNodes runs this node's part of a multi-node job: meet the other
// launchers, start this node's workers on the embedded transport, and end
// the job everywhere when any node fails.
func (l *Launcher) runNodes(ctx context.Context, o *Options, spec Spec, n Nodes) error {
	hexSecret, err := NodesSecret(n, config.Lookup(l.Environ))
	if err != nil {
		return err
	}
	key, err := secret.Parse(hexSecret)
	if err != nil {
		return err
	}
	timeout, err := l.nodesTimeout(o)
	if err != nil {
		return err
	}
	spec.Secret = config.Secret(hexSecret)
	host, _ := os.Hostname()
	if o.DryRun && n.Elastic() {
		fmt.Fprintf(l.Stdout, "elastic multi-node job: %d to %d nodes of %d workers; node %d; node 0 at %s; each worker: HOROVOD_ELASTIC=1, the rendezvous gives its rank; runs %s\n",
			n.Min, n.N, n.PerNode, n.Rank, n.Master(), ShellQuote(spec.Command))
		return nil
	}
	if o.DryRun {
		labels := make([]string, n.N)
		for i := range labels {
			labels[i] = "node" + strconv.Itoa(i)
		}
		labels[n.Rank] = host
		_, err := l.nodeWorkers(spec, n, NodeLabels(labels), 1, true)
		return err
	}
	node := nodeBase{l: l, o: o, spec: spec, n: n, key: key, host: host, timeout: timeout}
	switch {
	case n.Elastic() && n.Rank == 0:
		return l.runElasticMaster(ctx, o, spec, n, key, host)
	case n.Elastic():
		return l.drive(ctx, &elasticMemberRun{nodeBase: node})
	case n.Rank == 0:
		return l.drive(ctx, &masterNodeRun{nodeBase: node})
	}
	return l.drive(ctx, &otherNodeRun{nodeBase: node})
}

// nodeBase is what the run path of a node of a multi-node job is given:
// the launcher, the options and the job, the nodes, the job's secret,
// this machine's name, and how long the nodes wait for each other.
type nodeBase struct {
	l       *Launcher
	o       *Options
	spec    Spec
	n       Nodes
	key     []byte
	host    string
	timeout time.Duration
}

// nodeWorkers plans this node's workers: the whole job's plan, of which
// this node's slots. It prints them with --dry-run and --verbose.
func (l *Launcher) nodeWorkers(spec Spec, n Nodes, labels []string, port int, show bool) ([]GlooWorker, error) {
	me := labels[n.Rank]
	spec.Hosts = NodeHosts(labels, n.PerNode)
	spec.NP = n.N * n.PerNode
	spec.IsLocal = func(h string) bool { return h == me }
	spec.RendezvousAddr, spec.RendezvousPort = n.MasterAddr, port
	all, err := BuildGlooPlan(spec)
	if err != nil {
		return nil, err
	}
	var mine []GlooWorker
	for _, w := range all {
		if !w.Remote {
			mine = append(mine, w)
		}
	}
	if show {
		for _, line := range DescribeGlooPlan(mine) {
			fmt.Fprintln(l.Stdout, line)
		}
	}
	return mine, nil
}

// startNodeWorkers runs this node's workers (with srv where this node
// hosts the rendezvous) until they end or abort says to stop them.
func (l *Launcher) startNodeWorkers(ctx context.Context, o *Options, spec Spec, n Nodes, labels []string, port int, srv *rendezvous.Server, abort <-chan error) error {
	return l.drive(ctx, &glooRun{l: l, o: o, s: spec, node: &nodePart{n: n, labels: labels, port: port}, srv: srv, abort: abort})
}

// masterNodeRun is node 0's run path of a multi-node job: it hosts the
// meeting and the workers' rendezvous, runs its own workers, and ends the
// job on every node when one fails. Its plan is the meeting of the nodes' launchers and the workers' rendezvous; it
// starts the job on every node and its own workers (a glooRun), and
// watches the nodes' reports until every node has ended.
type masterNodeRun struct {
	nodeBase

	arrivals chan nodeArrival
	nodes    []*nodeConn // by node rank; nil for node 0
	hosts    []string
	labels   []string
	srv      *rendezvous.Server
	port     int // the workers' rendezvous
	events   chan nodeEvent
	result   chan error // this node's workers' end
	abort    chan error

	done      []bool
	nodeFail  *NodeError
	own       error
	ownDone   bool
	preempted bool
}

// nodeArrival is a node's launcher that has proven the secret and said
// hello.
type nodeArrival struct {
	nc    *nodeConn
	hello nodeHello
}

// nodeEvent is a message from a node's launcher, or the end of its
// connection (err).
type nodeEvent struct {
	rank int
	msg  nodeMsg
	err  error
}

// forwards is false: the glooRun of node 0's own workers passes signals on.
func (r *masterNodeRun) forwards() bool { return false }

func (r *masterNodeRun) plan(ctx context.Context, td *teardown) error {
	l, n := r.l, r.n
	lc := net.ListenConfig{KeepAlive: nodeKeepAlive}
	ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(n.MasterPort))
	if err != nil {
		return fmt.Errorf("node 0 cannot listen on port %d (--master-port) for the other nodes: %w", n.MasterPort, err)
	}
	td.add(func() { ln.Close() })
	fmt.Fprintf(l.Stderr, "gohorovodrun: node 0 of %d: waiting on port %d for the other nodes' launchers\n", n.N, n.MasterPort)
	r.nodes = make([]*nodeConn, n.N)
	r.hosts = make([]string, n.N)
	r.hosts[0] = r.host
	r.arrivals = make(chan nodeArrival)
	stopAccept := make(chan struct{})
	var acceptWG sync.WaitGroup
	acceptWG.Add(1)
	go func() { defer acceptWG.Done(); r.accept(ln, stopAccept, &acceptWG) }()
	td.add(func() {
		close(stopAccept)
		ln.Close()
		for _, nc := range r.nodes {
			if nc != nil {
				nc.c.Close()
			}
		}
		acceptWG.Wait()
	})
	if err := r.meet(ctx); err != nil {
		return err
	}
	r.labels = NodeLabels(r.hosts)
	// The workers' rendezvous, on a port of its own, for every node's
	// workers.
	rln, err := net.Listen("tcp", ":0")
	if err != nil {
		return fmt.Errorf("the rendezvous server cannot listen: %w", err)
	}
	td.add(func() { rln.Close() })
	r.port = rln.Addr().(*net.TCPAddr).Port
	expect := make([]rendezvous.Slot, 0, n.N*n.PerNode)
	for _, lb := range r.labels {
		for lr := 0; lr < n.PerNode; lr++ {
			expect = append(expect, rendezvous.Slot{Host: lb, LocalRank: lr})
		}
	}
	r.srv, err = l.serveRendezvous(td, rln, r.key, expect)
	return err
}

// accept takes the nodes' launchers' connections until ln is closed;
// one that arrives after the job has started is refused.
func (r *masterNodeRun) accept(ln net.Listener, stop <-chan struct{}, wg *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, h, ok := acceptNode(c, r.key, r.n.LinkSilence, r.l.Stderr)
			if !ok {
				return
			}
			select {
			case r.arrivals <- nodeArrival{nc, h}:
			case <-stop:
				_ = nc.send(nodeMsg{Refused: "the job has started without this node"})
				c.Close()
			}
		}()
	}
}

// meet waits until every node's launcher has joined, within the timeout.
func (r *masterNodeRun) meet(ctx context.Context) error {
	n := r.n
	deadline := time.NewTimer(r.timeout)
	defer deadline.Stop()
	for joined := 1; joined < n.N; {
		select {
		case a := <-r.arrivals:
			h := a.hello
			if refuse := r.refusal(h); refuse != "" {
				fmt.Fprintf(r.l.Stderr, "gohorovodrun: refused the launcher at %s: %s\n", a.nc.c.RemoteAddr(), refuse)
				_ = a.nc.send(nodeMsg{Refused: refuse})
				a.nc.c.Close()
				continue
			}
			r.nodes[h.NodeRank], r.hosts[h.NodeRank] = a.nc, h.Host
			joined++
		case <-deadline.C:
			var missing []string
			for i := 1; i < n.N; i++ {
				if r.nodes[i] == nil {
					missing = append(missing, strconv.Itoa(i))
				}
			}
			return fmt.Errorf("node 0: the launchers of node(s) %v did not arrive at port %d within %v (--start-timeout, %s)", missing, n.MasterPort, r.timeout, EnvStartTimeout)
		case <-ctx.Done():
			return ErrInterrupted
		}
	}
	return nil
}

// refusal says why node 0 does not take a node that said hello h, or "".
func (r *masterNodeRun) refusal(h nodeHello) string {
	n := r.n
	switch {
	case h.NNodes != n.N:
		return fmt.Sprintf("this node says the job has %d nodes, node 0 says %d", h.NNodes, n.N)
	case h.PerNode != n.PerNode:
		return fmt.Sprintf("this node says %d workers per node, node 0 says %d", h.PerNode, n.PerNode)
	case h.NodeRank <= 0 || h.NodeRank >= n.N:
		return fmt.Sprintf("node rank %d is not one of 1 to %d", h.NodeRank, n.N-1)
	case r.nodes[h.NodeRank] != nil:
		return fmt.Sprintf("node rank %d has already joined (from %s)", h.NodeRank, r.nodes[h.NodeRank].c.RemoteAddr())
	}
	return ""
}

// start tells every node to start, watches them until each reports its
// end, and starts node 0's own workers.
func (r *masterNodeRun) start(ctx context.Context, _ *teardown) error {
	n := r.n
	r.events = make(chan nodeEvent, 2*n.N)
	for rank := 1; rank < n.N; rank++ {
		if err := r.nodes[rank].send(nodeMsg{Start: &nodeStart{Labels: r.labels, RendezvousPort: r.port}}); err != nil {
			r.events <- nodeEvent{rank: rank, err: err}
			continue
		}
		go func() {
			for {
				m, err := r.nodes[rank].recv()
				r.events <- nodeEvent{rank: rank, msg: m, err: err}
				if err != nil || m.Done || m.Failed != "" {
					return
				}
			}
		}()
	}
	fmt.Fprintf(r.l.Stderr, "gohorovodrun: all %d nodes have met: %v\n", n.N, r.labels)
	r.done = make([]bool, n.N)
	r.abort = make(chan error, 1)
	r.result = make(chan error, 1)
	go func() { r.result <- r.l.startNodeWorkers(ctx, r.o, r.spec, n, r.labels, r.port, r.srv, r.abort) }()
	return nil
}

func (r *masterNodeRun) watch(ctx context.Context, _ *watching) error {
	for remaining := r.n.N - 1; !r.ownDone || (remaining > 0 && r.nodeFail == nil); {
		select {
		case own := <-r.result:
			remaining -= r.ownEnded(own)
		case e := <-r.events:
			if e.msg.Done && e.err == nil {
				r.done[e.rank] = true
				r.preempted = r.preempted || e.msg.Preempted
				remaining--
				continue
			}
			if r.nodeFail == nil && !r.done[e.rank] {
				r.nodeFail = r.failure(e)
				r.tellAll(r.nodeFail)
				if !r.ownDone {
					r.abort <- r.nodeFail
				}
			}
		case <-ctx.Done():
			if r.ownDone {
				return ErrInterrupted // the other nodes see the meeting end
			}
		}
	}
	switch {
	case errors.Is(r.own, ErrInterrupted):
		return r.own
	case r.nodeFail != nil:
		return r.nodeFail
	case r.preempted:
		return ErrPreempted
	}
	return nil
}

// ownEnded takes the end of node 0's own workers; it returns how many
// other nodes it found done meanwhile.
func (r *masterNodeRun) ownEnded(own error) (done int) {
	r.own, r.ownDone = own, true
	if errors.Is(own, ErrPreempted) {
		r.own, own, r.preempted = nil, nil, true
	}
	if own != nil && r.nodeFail == nil && !errors.Is(own, ErrInterrupted) {
		// A node's failure may be what made these workers fail.
		select {
		case e := <-r.events:
			if e.err != nil || e.msg.Failed != "" {
				r.nodeFail = r.failure(e)
			} else if e.msg.Done {
				r.done[e.rank] = true
				done++
			}
		case <-time.After(nodeBlameGrace):
		}
	}
	if own != nil && r.nodeFail == nil {
		r.nodeFail = &NodeError{NodeRank: 0, Host: r.labels[0], Err: own}
		if errors.Is(own, ErrInterrupted) {
			r.nodeFail.Err = errors.New("its launcher was interrupted")
		}
	}
	if r.nodeFail != nil {
		r.tellAll(r.nodeFail)
	}
	return done
}

// failure is the job's failure that a node's event e tells of.
func (r *masterNodeRun) failure(e nodeEvent) *NodeError {
	ne := &NodeError{NodeRank: e.rank, Host: r.labels[e.rank]}
	switch {
	case e.msg.Failed != "":
		ne.Err = errors.New(e.msg.Failed)
	default:
		ne.Err = fmt.Errorf("lost its launcher (%v)", e.err)
	}
	return ne
}

// tellAll tells every other node of the job's failure ne.
func (r *masterNodeRun) tellAll(ne *NodeError) {
	for rank := 1; rank < r.n.N; rank++ {
		if rank != ne.NodeRank {
			_ = r.nodes[rank].send(nodeMsg{Failed: ne.Err.Error(), FailedNode: ne.NodeRank, FailedHost: ne.Host})
		}
	}
}

// otherNodeRun is the run path of a node other than 0 of a multi-node
// job: it meets node 0, runs its workers, and stops them when node 0 says
// the job is over or cannot be reached. Its plan is joining node 0 and being told the job; it watches
// node 0's connection while its own workers (a glooRun) run.
type otherNodeRun struct {
	nodeBase

	nc    *nodeConn
	job   nodeStart
	ends  chan masterEnd
	abort chan error
}

// masterEnd is node 0's word, or the end of the meeting, which ends the
// job on this node too.
type masterEnd struct {
	failed *NodeError // node 0 said the job failed
	lost   error      // the connection ended
}

// forwards is false: the glooRun of this node's workers passes signals on.
func (r *otherNodeRun) forwards() bool { return false }

func (r *otherNodeRun) plan(ctx context.Context, td *teardown) error {
	l, n := r.l, r.n
	master := n.Master()
	nc, err := l.joinMaster(ctx, n, r.key, r.host, r.timeout)
	if err != nil {
		return err
	}
	r.nc = nc
	td.add(func() { nc.c.Close() })
	fmt.Fprintf(l.Stderr, "gohorovodrun: node %d of %d: joined node 0 at %s, waiting for the other nodes\n", n.Rank, n.N, master)
	startc := make(chan nodeMsg, 1)
	errc := make(chan error, 1)
	go func() {
		m, err := nc.recv()
		if err != nil {
			errc <- err
			return
		}
		startc <- m
	}()
	select {
	case <-ctx.Done():
		return ErrInterrupted
	case err := <-errc:
		return &NodeError{NodeRank: 0, Host: n.MasterAddr, Err: fmt.Errorf("its launcher closed the meeting before the job started (%v)", err)}
	case m := <-startc:
		switch {
		case m.Refused != "":
			return usagef("node %d: node 0 at %s refused this node: %s", n.Rank, master, m.Refused)
		case m.Failed != "":
			return &NodeError{NodeRank: m.FailedNode, Host: m.FailedHost, Err: errors.New(m.Failed)}
		case m.Start == nil || len(m.Start.Labels) != n.N || m.Start.RendezvousPort <= 0:
			return fmt.Errorf("node %d: node 0 at %s sent a malformed start", n.Rank, master)
		}
		r.job = *m.Start
	}
	return nil
}

// start watches node 0's connection: its word, or the end of the
// meeting, aborts this node's workers.
func (r *otherNodeRun) start(context.Context, *teardown) error {
	labels := r.job.Labels
	r.ends = make(chan masterEnd, 1)
	r.abort = make(chan error, 1)
	go func() {
		m, err := r.nc.recv()
		var e masterEnd
		switch {
		case err != nil:
			e.lost = err
			r.abort <- &NodeError{NodeRank: 0, Host: labels[0], Err: fmt.Errorf("lost its launcher (%v)", err)}
		case m.Failed != "":
			e.failed = &NodeError{NodeRank: m.FailedNode, Host: m.FailedHost, Err: errors.New(m.Failed)}
			r.abort <- e.failed
		default:
			e.lost = errors.New("unexpected message")
			r.abort <- &NodeError{NodeRank: 0, Host: labels[0], Err: errors.New("its launcher sent an unexpected message")}
		}
		r.ends <- e
	}()
	return nil
}

// watch runs this node's workers and reports their end to node 0.
func (r *otherNodeRun) watch(ctx context.Context, _ *watching) error {
	labels := r.job.Labels
	own := r.l.startNodeWorkers(ctx, r.o, r.spec, r.n, labels, r.job.RendezvousPort, nil, r.abort)
	preempted := errors.Is(own, ErrPreempted)
	if preempted {
		own = nil
	}
	var ne *NodeError
	if errors.As(own, &ne) {
		return own // stopped on node 0's word, or for its loss
	}
	if own != nil {
		return r.failed(own)
	}
	if err := r.nc.send(nodeMsg{Done: true, Preempted: preempted}); err != nil {
		return &NodeError{NodeRank: 0, Host: labels[0], Err: fmt.Errorf("lost its launcher before this node could report its end (%v)", err)}
	}
	// Node 0 closes the meeting once every node is done, or tells of a
	// failure elsewhere first.
	select {
	case e := <-r.ends:
		if e.failed != nil {
			return e.failed
		}
		if preempted {
			return ErrPreempted
		}
		return nil
	case <-ctx.Done():
		return ErrInterrupted
	}
}

// failed reports this node's workers' failure own to node 0, unless
// another node's failure was its cause.
func (r *otherNodeRun) failed(own error) error {
	labels := r.job.Labels
	if !errors.Is(own, ErrInterrupted) {
		// Was another node's failure the cause?
		select {
		case e := <-r.ends:
			if e.failed != nil {
				return e.failed
			}
			return &NodeError{NodeRank: 0, Host: labels[0], Err: fmt.Errorf("lost its launcher (%v)", e.lost)}
		case <-time.After(nodeBlameGrace):
		}
	}
	msg := own.Error()
	if errors.Is(own, ErrInterrupted) {
		msg = "its launcher was interrupted"
	}
	_ = r.nc.send(nodeMsg{Failed: msg})
	if errors.Is(own, ErrInterrupted) {
		return own
	}
	return &NodeError{NodeRank: r.n.Rank, Host: labels[r.n.Rank], Err: own}
}

// runNodesFrom checks what an ordinary launch would (the knobs, the
// program) and runs this node's part of the job.
func (l *Launcher) runNodesFrom(ctx context.Context, o *Options, n Nodes) error {
	if o.MPI {
		return usagef("--nnodes runs the workers on the embedded transport: drop --mpi")
	}
	if o.MPIArgs != "" {
		return usagef("--mpi-args has no effect with --nnodes (the workers are not started by mpirun)")
	}
	oo := *o
	oo.Gloo = true
	oo.Hosts, oo.Hostfile = "localhost:"+strconv.Itoa(n.PerNode), ""
	oo.NP = n.PerNode
	spec, err := l.Spec(ctx, &oo)
	if err != nil {
		return err
	}
	for _, w := range knobWarnings(o, spec.Config) {
		fmt.Fprintln(l.Stderr, "gohorovodrun: "+w)
	}
	n.LinkSilence = LinkSilence(spec.Config.HeartbeatTimeout)
	return l.runNodes(ctx, o, spec, n)
}

// joinMaster connects to node 0's launcher, retrying until timeout, proves
// the secret and says hello.
func (l *Launcher) joinMaster(ctx context.Context, n Nodes, key []byte, host string, timeout time.Duration) (*nodeConn, error) {
	master := n.Master()
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var c net.Conn
	for said := false; ; {
		d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: nodeKeepAlive}
		var err error
		if c, err = d.DialContext(dctx, "tcp", master); err == nil {
			if err = secret.Handshake(c, key, secret.Dialer, rendezvous.HandshakeTimeout); err == nil {
				break
			}
			c.Close()
			if errors.Is(err, secret.ErrRefused) {
				return nil, fmt.Errorf("node %d: the launcher at %s (node 0, --master-addr) refused this node: %w (is %s the same on every node?)", n.Rank, master, err, config.EnvSecret)
			}
		}
		if !said {
			fmt.Fprintf(l.Stderr, "gohorovodrun: node %d of %d: waiting for node 0's launcher at %s (--master-addr, --master-port): %v\n", n.Rank, n.N, master, err)
			said = true
		}
		select {
		case <-dctx.Done():
			if ctx.Err() != nil {
				return nil, ErrInterrupted
			}
			return nil, fmt.Errorf("node %d: node 0's launcher at %s (--master-addr, --master-port) did not answer within %v (--start-timeout, %s): %v", n.Rank, master, timeout, EnvStartTimeout, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	setKeepAlive(c, n.LinkSilence)
	nc := newNodeConn(c)
	if err := nc.send(nodeMsg{Hello: &nodeHello{NodeRank: n.Rank, NNodes: n.N, PerNode: n.PerNode, Host: host}}); err != nil {
		return nil, fmt.Errorf("node %d: sending its hello to node 0 at %s: %w", n.Rank, master, err)
	}
	return nc, nil
}
