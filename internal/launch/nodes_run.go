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
	"github.com/gohorovod/gohorovod/internal/sockdir"
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
	// Done: the node's workers all ended well; Preempted with it: they
	// stopped when told to (ExitPreempted).
	Done      bool `json:",omitempty"`
	Preempted bool `json:",omitempty"`
	// Run and Exited: an elastic job's workers on another node, started
	// or signalled on node 0's word, and their ends.
	Run    *nodeWorkerRun  `json:",omitempty"`
	Exited *nodeWorkerExit `json:",omitempty"`
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
	if n.Elastic() {
		if n.Rank == 0 {
			return l.runElasticMaster(ctx, o, spec, n, key, host)
		}
		return l.runElasticMember(ctx, o, spec, n, key, host, timeout)
	}
	if n.Rank == 0 {
		return l.runMasterNode(ctx, o, spec, n, key, host, timeout)
	}
	return l.runOtherNode(ctx, o, spec, n, key, host, timeout)
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
	var err error
	if spec.SocketDir, err = jobSocketDir(l.Environ); err != nil {
		return err
	}
	defer sockdir.Remove(spec.SocketDir)
	workers, err := l.nodeWorkers(spec, n, labels, port, o.Verbose)
	if err != nil {
		return err
	}
	return l.executeGloo(ctx, spec, workers, srv, abort, o.OutputFilename)
}

// runMasterNode is node 0: it hosts the meeting and the workers'
// rendezvous, runs its own workers, and ends the job on every node when
// one fails.
func (l *Launcher) runMasterNode(ctx context.Context, o *Options, spec Spec, n Nodes, key []byte, host string, timeout time.Duration) error {
	lc := net.ListenConfig{KeepAlive: nodeKeepAlive}
	ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(n.MasterPort))
	if err != nil {
		return fmt.Errorf("node 0 cannot listen on port %d (--master-port) for the other nodes: %w", n.MasterPort, err)
	}
	defer ln.Close()
	fmt.Fprintf(l.Stderr, "gohorovodrun: node 0 of %d: waiting on port %d for the other nodes' launchers\n", n.N, n.MasterPort)

	type arrival struct {
		nc    *nodeConn
		hello nodeHello
	}
	arrivals := make(chan arrival)
	stopAccept := make(chan struct{})
	var acceptWG sync.WaitGroup
	acceptWG.Add(1)
	go func() {
		defer acceptWG.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			acceptWG.Add(1)
			go func() {
				defer acceptWG.Done()
				nc, h, ok := acceptNode(c, key, n.LinkSilence, l.Stderr)
				if !ok {
					return
				}
				select {
				case arrivals <- arrival{nc, h}:
				case <-stopAccept:
					_ = nc.send(nodeMsg{Refused: "the job has started without this node"})
					c.Close()
				}
			}()
		}
	}()
	nodes := make([]*nodeConn, n.N)
	hosts := make([]string, n.N)
	hosts[0] = host
	closeAll := func() {
		for _, nc := range nodes {
			if nc != nil {
				nc.c.Close()
			}
		}
	}
	defer func() {
		close(stopAccept)
		ln.Close()
		closeAll()
		acceptWG.Wait()
	}()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for joined := 1; joined < n.N; {
		select {
		case a := <-arrivals:
			h := a.hello
			var refuse string
			switch {
			case h.NNodes != n.N:
				refuse = fmt.Sprintf("this node says the job has %d nodes, node 0 says %d", h.NNodes, n.N)
			case h.PerNode != n.PerNode:
				refuse = fmt.Sprintf("this node says %d workers per node, node 0 says %d", h.PerNode, n.PerNode)
			case h.NodeRank <= 0 || h.NodeRank >= n.N:
				refuse = fmt.Sprintf("node rank %d is not one of 1 to %d", h.NodeRank, n.N-1)
			case nodes[h.NodeRank] != nil:
				refuse = fmt.Sprintf("node rank %d has already joined (from %s)", h.NodeRank, nodes[h.NodeRank].c.RemoteAddr())
			}
			if refuse != "" {
				fmt.Fprintf(l.Stderr, "gohorovodrun: refused the launcher at %s: %s\n", a.nc.c.RemoteAddr(), refuse)
				_ = a.nc.send(nodeMsg{Refused: refuse})
				a.nc.c.Close()
				continue
			}
			nodes[h.NodeRank], hosts[h.NodeRank] = a.nc, h.Host
			joined++
		case <-deadline.C:
			var missing []string
			for i := 1; i < n.N; i++ {
				if nodes[i] == nil {
					missing = append(missing, strconv.Itoa(i))
				}
			}
			return fmt.Errorf("node 0: the launchers of node(s) %v did not arrive at port %d within %v (--start-timeout, %s)", missing, n.MasterPort, timeout, EnvStartTimeout)
		case <-ctx.Done():
			return ErrInterrupted
		}
	}
	labels := NodeLabels(hosts)

	// The workers' rendezvous, on a port of its own, for every node's
	// workers.
	rln, err := net.Listen("tcp", ":0")
	if err != nil {
		return fmt.Errorf("the rendezvous server cannot listen: %w", err)
	}
	defer rln.Close()
	port := rln.Addr().(*net.TCPAddr).Port
	expect := make([]rendezvous.Slot, 0, n.N*n.PerNode)
	for _, lb := range labels {
		for lr := 0; lr < n.PerNode; lr++ {
			expect = append(expect, rendezvous.Slot{Host: lb, LocalRank: lr})
		}
	}
	srv, err := rendezvous.NewServer(key, expect)
	if err != nil {
		return err
	}
	srv.Logf = func(format string, args ...any) { fmt.Fprintf(l.Stderr, "gohorovodrun: "+format+"\n", args...) }
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(rln) }()
	defer func() { srv.Close(); <-served }()

	// Watch every node until it reports its end.
	type nodeEvent struct {
		rank int
		msg  nodeMsg
		err  error
	}
	events := make(chan nodeEvent, 2*n.N)
	for r := 1; r < n.N; r++ {
		if err := nodes[r].send(nodeMsg{Start: &nodeStart{Labels: labels, RendezvousPort: port}}); err != nil {
			events <- nodeEvent{rank: r, err: err}
			continue
		}
		go func() {
			for {
				m, err := nodes[r].recv()
				events <- nodeEvent{rank: r, msg: m, err: err}
				if err != nil || m.Done || m.Failed != "" {
					return
				}
			}
		}()
	}
	fmt.Fprintf(l.Stderr, "gohorovodrun: all %d nodes have met: %v\n", n.N, labels)
	failure := func(e nodeEvent) *NodeError {
		ne := &NodeError{NodeRank: e.rank, Host: labels[e.rank]}
		switch {
		case e.msg.Failed != "":
			ne.Err = errors.New(e.msg.Failed)
		default:
			ne.Err = fmt.Errorf("lost its launcher (%v)", e.err)
		}
		return ne
	}
	tellAll := func(ne *NodeError) {
		for r := 1; r < n.N; r++ {
			if r != ne.NodeRank {
				_ = nodes[r].send(nodeMsg{Failed: ne.Err.Error(), FailedNode: ne.NodeRank, FailedHost: ne.Host})
			}
		}
	}
	done := make([]bool, n.N)
	var nodeFail *NodeError
	abort := make(chan error, 1)
	result := make(chan error, 1)
	go func() { result <- l.startNodeWorkers(ctx, o, spec, n, labels, port, srv, abort) }()
	var own error
	ownDone, preempted := false, false
	for remaining := n.N - 1; !ownDone || (remaining > 0 && nodeFail == nil); {
		select {
		case own = <-result:
			ownDone = true
			if errors.Is(own, ErrPreempted) {
				own, preempted = nil, true
			}
			if own != nil && nodeFail == nil && !errors.Is(own, ErrInterrupted) {
				// A node's failure may be what made these workers fail.
				select {
				case e := <-events:
					if e.err != nil || e.msg.Failed != "" {
						nodeFail = failure(e)
					} else if e.msg.Done {
						done[e.rank] = true
						remaining--
					}
				case <-time.After(nodeBlameGrace):
				}
			}
			if own != nil && nodeFail == nil {
				nodeFail = &NodeError{NodeRank: 0, Host: labels[0], Err: own}
				if errors.Is(own, ErrInterrupted) {
					nodeFail.Err = errors.New("its launcher was interrupted")
				}
			}
			if nodeFail != nil {
				tellAll(nodeFail)
			}
		case e := <-events:
			if e.msg.Done && e.err == nil {
				done[e.rank] = true
				preempted = preempted || e.msg.Preempted
				remaining--
				continue
			}
			if nodeFail == nil && !done[e.rank] {
				nodeFail = failure(e)
				tellAll(nodeFail)
				if !ownDone {
					abort <- nodeFail
				}
			}
		case <-ctx.Done():
			if ownDone {
				return ErrInterrupted // the other nodes see the meeting end
			}
		}
	}
	if errors.Is(own, ErrInterrupted) {
		return own
	}
	if nodeFail != nil {
		return nodeFail
	}
	if preempted {
		return ErrPreempted
	}
	return nil
}

// runOtherNode is a node other than 0: it meets node 0, runs its workers,
// and stops them when node 0 says the job is over or cannot be reached.
func (l *Launcher) runOtherNode(ctx context.Context, o *Options, spec Spec, n Nodes, key []byte, host string, timeout time.Duration) error {
	master := n.Master()
	nc, err := l.joinMaster(ctx, n, key, host, timeout)
	if err != nil {
		return err
	}
	defer nc.c.Close()
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
	var start nodeStart
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
		start = *m.Start
	}
	labels := start.Labels
	// Node 0's word, or the end of the meeting, ends the job here too.
	type masterEnd struct {
		failed *NodeError // node 0 said the job failed
		lost   error      // the connection ended
	}
	ends := make(chan masterEnd, 1)
	abort := make(chan error, 1)
	go func() {
		m, err := nc.recv()
		var e masterEnd
		switch {
		case err != nil:
			e.lost = err
			abort <- &NodeError{NodeRank: 0, Host: labels[0], Err: fmt.Errorf("lost its launcher (%v)", err)}
		case m.Failed != "":
			e.failed = &NodeError{NodeRank: m.FailedNode, Host: m.FailedHost, Err: errors.New(m.Failed)}
			abort <- e.failed
		default:
			e.lost = errors.New("unexpected message")
			abort <- &NodeError{NodeRank: 0, Host: labels[0], Err: errors.New("its launcher sent an unexpected message")}
		}
		ends <- e
	}()
	own := l.startNodeWorkers(ctx, o, spec, n, labels, start.RendezvousPort, nil, abort)
	preempted := errors.Is(own, ErrPreempted)
	if preempted {
		own = nil
	}
	var ne *NodeError
	if errors.As(own, &ne) {
		return own // stopped on node 0's word, or for its loss
	}
	if own != nil {
		if !errors.Is(own, ErrInterrupted) {
			// Was another node's failure the cause?
			select {
			case e := <-ends:
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
		_ = nc.send(nodeMsg{Failed: msg})
		if errors.Is(own, ErrInterrupted) {
			return own
		}
		return &NodeError{NodeRank: n.Rank, Host: labels[n.Rank], Err: own}
	}
	if err := nc.send(nodeMsg{Done: true, Preempted: preempted}); err != nil {
		return &NodeError{NodeRank: 0, Host: labels[0], Err: fmt.Errorf("lost its launcher before this node could report its end (%v)", err)}
	}
	// Node 0 closes the meeting once every node is done, or tells of a
	// failure elsewhere first.
	select {
	case e := <-ends:
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
