package embedded

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/secret"
	"github.com/gohorovod/gohorovod/runtime/comm"
)

// Config describes one rank's member of a new group (see New).
type Config struct {
	// Rank is this process's rank, in [0, len(Peers)).
	Rank int
	// Peers holds every rank's addresses, in rank order; Peers[Rank]
	// describes this rank.
	Peers []Peer
	// Secret is the job's key: every connection, in both directions, runs
	// secret.Handshake with it before anything else is said.
	Secret []byte
	// Listeners are this rank's, already listening (see Listen). New accepts
	// the connections of the higher ranks on them; the caller still owns
	// them and closes them (once New has returned, they are no longer
	// needed).
	Listeners *Listeners
	// ConnectTimeout bounds how long New waits for the mesh to be complete
	// (default 60 s). On expiry the error names the ranks, and their hosts,
	// that never connected.
	ConnectTimeout time.Duration
	// Logf, when set, receives debug messages: a pair of ranks on one host
	// that uses its Unix socket instead of shared memory, and why.
	Logf func(format string, args ...any)
}

// DefaultConnectTimeout is Config.ConnectTimeout's default.
const DefaultConnectTimeout = 60 * time.Second

// handshakeTimeout bounds one connection's authentication and hello, so
// that a silent stranger cannot hold an accepting goroutine for long.
const handshakeTimeout = 10 * time.Second

// minRTO is the floor of the retransmission timeout of every TCP
// connection, where the kernel lets it be set (lowerRTOFloor).
const minRTO = 5 * time.Millisecond

// maxRTO is the ceiling of the retransmission timeout of every TCP
// connection, where the kernel lets it be set (lowerRTOFloor).
const maxRTO = time.Second

// sockBuf is the kernel socket buffer size asked for on every connection
// (the kernel may grant less).
const sockBuf = 4 << 20

// helloMagic opens the hello each side sends after authentication.
var helloMagic = [8]byte{'g', 'h', 'v', 'm', 'e', 's', 'h', 1}

// New connects this rank to every other rank of the group described by cfg
// and returns its member of the group, with the whole group as its ranks.
// Every rank calls New at about the same time (within ConnectTimeout).
//
// Connections form a full mesh: each rank dials every lower rank and accepts
// the connections of the higher ranks on its listeners. Two ranks with equal
// Host talk over the acceptor's Unix socket when it has one, others over TCP
// (TCP_NODELAY on). Each connection first proves knowledge of cfg.Secret in
// both directions (secret.Handshake); a connection that fails it is closed and
// New keeps accepting. Then the dialer says which rank it is, so that each
// connection is attributed. New returns once every connection is up, or an
// error naming the ranks that never connected when ctx ends or
// ConnectTimeout expires.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	n := len(cfg.Peers)
	switch {
	case n == 0:
		return nil, errors.New("embedded: New: no peers")
	case cfg.Rank < 0 || cfg.Rank >= n:
		return nil, fmt.Errorf("embedded: New: rank %d out of range for %d peers", cfg.Rank, n)
	case len(cfg.Secret) == 0:
		return nil, errors.New("embedded: New: no secret")
	case cfg.Listeners == nil:
		return nil, errors.New("embedded: New: no listeners")
	}
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := &mesh{
		rank:    cfg.Rank,
		size:    n,
		peers:   slices.Clone(cfg.Peers),
		conns:   make([]*conn, n),
		comms:   map[uint64]*Comm{},
		aborted: map[uint64]abortNote{},
		closing: make(chan struct{}),
	}
	nets, err := dialAll(ctx, cfg, timeout)
	if err != nil {
		return nil, err
	}
	links, err := setupShm(nets, cfg.Rank, cfg.Logf)
	if err != nil {
		for _, c := range nets {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	for p, c := range nets {
		if c != nil {
			m.conns[p] = newConn(m, p, c, links[p])
		}
	}
	for _, c := range m.conns {
		if c != nil {
			m.wg.Add(2)
			go c.readLoop()
			go c.writeLoop()
		}
	}
	members := make([]int, n)
	for i := range members {
		members[i] = i
	}
	return m.newComm(rootID, members, cfg.Rank, true), nil
}

// connResult is one established, attributed connection, or a failure.
type connResult struct {
	peer int
	c    net.Conn
	err  error // a dial's last error (peer names the rank dialed)
}

// dialAll builds this rank's side of the mesh: it dials the lower ranks and
// accepts the higher ones, and returns one connection per other rank
// (nil at this rank), or an error naming the ranks that never connected.
func dialAll(ctx context.Context, cfg Config, timeout time.Duration) ([]net.Conn, error) {
	n, me := len(cfg.Peers), cfg.Rank
	out := make([]net.Conn, n)
	results := make(chan connResult, 2*n)
	lastErr := make([]error, n)
	var wg sync.WaitGroup
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	for p := range me {
		wg.Go(func() {
			c, err := dial(ctx, cfg, p)
			results <- connResult{peer: p, c: c, err: err}
		})
	}
	acc := newAcceptor(ctx, cfg, results)
	need := n - 1
	var err error
	for need > 0 && err == nil {
		select {
		case r := <-results:
			switch {
			case r.err != nil:
				lastErr[r.peer] = r.err
			case out[r.peer] != nil:
				r.c.Close() // a duplicate: keep the first
			default:
				out[r.peer] = r.c
				need--
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	stop()
	acc.stop()
	wg.Wait()
	// Late arrivals: close them (or keep them, when the mesh is complete and
	// they fill no slot, which cannot happen).
	for more := true; more; {
		select {
		case r := <-results:
			if r.err != nil {
				lastErr[r.peer] = r.err
			} else if out[r.peer] == nil && err == nil {
				out[r.peer] = r.c
			} else {
				r.c.Close()
			}
		default:
			more = false
		}
	}
	if err == nil {
		return out, nil
	}
	for _, c := range out {
		if c != nil {
			c.Close()
		}
	}
	var missing []string
	for p := range n {
		if p == me || out[p] != nil {
			continue
		}
		s := fmt.Sprintf("%d (host %s)", p, cfg.Peers[p].Host)
		if lastErr[p] != nil {
			s += fmt.Sprintf(": %v", lastErr[p])
		}
		missing = append(missing, s)
	}
	return nil, &ConnectError{Rank: me, Timeout: timeout, Missing: missingRanks(out, me), Detail: strings.Join(missing, "; "), Err: err}
}

func missingRanks(out []net.Conn, me int) []int {
	var r []int
	for p, c := range out {
		if p != me && c == nil {
			r = append(r, p)
		}
	}
	return r
}

// ConnectError reports a mesh that New could not complete: the ranks that
// never connected (with their hosts and, for ranks this one dialed, the last
// error in Detail).
type ConnectError struct {
	Rank    int           // this rank
	Timeout time.Duration // the connect timeout
	Missing []int         // ranks that never connected
	Detail  string        // each missing rank with its host (and last dial error)
	Err     error         // context.DeadlineExceeded, or the caller's context error
}

// Error names the missing ranks and their hosts.
func (e *ConnectError) Error() string {
	return fmt.Sprintf("embedded: rank %d: ranks never connected within %v: %s", e.Rank, e.Timeout, e.Detail)
}

// Unwrap returns the context error that ended the wait.
func (e *ConnectError) Unwrap() error { return e.Err }

// dial connects to the lower rank p, retrying until it answers or ctx ends,
// authenticates and says hello.
func dial(ctx context.Context, cfg Config, p int) (net.Conn, error) {
	me, target := cfg.Peers[cfg.Rank], cfg.Peers[p]
	network, addr := "tcp", target.TCP
	if me.Host == target.Host && target.Unix != "" {
		network, addr = "unix", target.Unix
	}
	var d net.Dialer
	backoff := 10 * time.Millisecond
	var last error
	for {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			err = greet(c, cfg, p)
			if err == nil {
				return c, nil
			}
			c.Close()
			// A refusal (the process there does not know the secret) is
			// retried too: the right rank may yet take the address.
			last = fmt.Errorf("%s %s: %w", network, addr, err)
		} else {
			last = fmt.Errorf("dial %s %s: %w", network, addr, err)
		}
		select {
		case <-ctx.Done():
			return nil, last
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// greet runs the dialer's side of a fresh connection: the handshake, then
// the hello, checking that the rank that answers is want.
func greet(c net.Conn, cfg Config, want int) error {
	if err := secret.Handshake(c, cfg.Secret, secret.Dialer, handshakeTimeout); err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	if err := writeHello(c, cfg.Rank, len(cfg.Peers)); err != nil {
		return fmt.Errorf("sending hello: %w", err)
	}
	r, size, err := readHello(c)
	if err != nil {
		return err
	}
	if r != want || size != len(cfg.Peers) {
		return fmt.Errorf("the rank at this address says it is rank %d of %d, want rank %d of %d", r, size, want, len(cfg.Peers))
	}
	return nil
}

func writeHello(c net.Conn, rank, size int) error {
	var b [16]byte
	copy(b[:8], helloMagic[:])
	binary.LittleEndian.PutUint32(b[8:], uint32(rank))
	binary.LittleEndian.PutUint32(b[12:], uint32(size))
	_, err := c.Write(b[:])
	return err
}

func readHello(c net.Conn) (rank, size int, err error) {
	var b [16]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, 0, fmt.Errorf("reading hello: %w", err)
	}
	if [8]byte(b[:8]) != helloMagic {
		return 0, 0, errors.New("not a gohorovod mesh hello")
	}
	return int(binary.LittleEndian.Uint32(b[8:])), int(binary.LittleEndian.Uint32(b[12:])), nil
}

// acceptor accepts the higher ranks' connections on a rank's listeners
// until stopped.
type acceptor struct {
	cfg     Config
	results chan<- connResult
	wg      sync.WaitGroup
	mu      sync.Mutex
	pending map[net.Conn]bool // connections still in their handshake
	stopped bool
}

type deadliner interface {
	net.Listener
	SetDeadline(time.Time) error
}

func newAcceptor(ctx context.Context, cfg Config, results chan<- connResult) *acceptor {
	a := &acceptor{cfg: cfg, results: results, pending: map[net.Conn]bool{}}
	if cfg.Rank == len(cfg.Peers)-1 {
		return a // nobody dials the highest rank
	}
	lns := []deadliner{cfg.Listeners.tcp}
	if cfg.Listeners.unix != nil {
		lns = append(lns, cfg.Listeners.unix)
	}
	for _, ln := range lns {
		ln.SetDeadline(time.Time{})
		a.wg.Go(func() { a.loop(ctx, ln) })
	}
	return a
}

func (a *acceptor) loop(ctx context.Context, ln deadliner) {
	// Wake Accept when ctx ends.
	stopWake := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Now()) })
	defer stopWake()
	defer ln.SetDeadline(time.Time{})
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. too many open files
			continue
		}
		a.mu.Lock()
		if a.stopped {
			a.mu.Unlock()
			c.Close()
			return
		}
		a.pending[c] = true
		a.mu.Unlock()
		a.wg.Go(func() { a.admit(c) })
	}
}

// admit authenticates one accepted connection and hands it on attributed,
// or closes it: a stranger without the secret, or a confused peer, is turned
// away without disturbing the mesh.
func (a *acceptor) admit(c net.Conn) {
	ok := false
	defer func() {
		if !ok {
			a.mu.Lock()
			delete(a.pending, c)
			a.mu.Unlock()
			c.Close()
		}
	}()
	if err := secret.Handshake(c, a.cfg.Secret, secret.Acceptor, handshakeTimeout); err != nil {
		return
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	r, size, err := readHello(c)
	if err != nil || size != len(a.cfg.Peers) || r <= a.cfg.Rank || r >= size {
		return
	}
	if err := writeHello(c, a.cfg.Rank, size); err != nil {
		return
	}
	// Leave the pending set before clearing the deadline, so that stop
	// cannot set one on a connection that is already handed on.
	a.mu.Lock()
	delete(a.pending, c)
	stopped := a.stopped
	a.mu.Unlock()
	if stopped {
		c.Close()
		ok = true // closed already
		return
	}
	c.SetDeadline(time.Time{})
	select {
	case a.results <- connResult{peer: r, c: c}:
	default: // a flood of duplicates: the mesh needs none of them
		c.Close()
	}
	ok = true
}

// stop ends accepting, closes connections still in their handshake and
// waits for every goroutine of the acceptor.
func (a *acceptor) stop() {
	a.mu.Lock()
	a.stopped = true
	for c := range a.pending {
		c.SetDeadline(time.Now())
	}
	a.mu.Unlock()
	for _, ln := range []deadliner{a.cfg.Listeners.tcp, a.unixListener()} {
		if ln != nil {
			ln.SetDeadline(time.Now())
		}
	}
	a.wg.Wait()
	for _, ln := range []deadliner{a.cfg.Listeners.tcp, a.unixListener()} {
		if ln != nil {
			ln.SetDeadline(time.Time{})
		}
	}
}

func (a *acceptor) unixListener() deadliner {
	if a.cfg.Listeners.unix == nil {
		return nil
	}
	return a.cfg.Listeners.unix
}

// abortNote remembers an abort frame for a group this rank has not made yet.
type abortNote struct {
	world int
	cause string
}

// mesh is one rank's connections to every other rank, shared by the
// communicators split from the group New made.
type mesh struct {
	rank, size int
	peers      []Peer
	conns      []*conn // by world rank; nil at this rank
	wg         sync.WaitGroup

	mu      sync.Mutex
	comms   map[uint64]*Comm     // live communicators, by id
	aborted map[uint64]abortNote // aborts received for ids not (yet) live
	closed  bool
	closing chan struct{} // closed when the mesh is being torn down
}

// register adds c to the live communicators and applies what is already
// known against it: an abort received early, a lost peer.
func (m *mesh) register(c *Comm) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		c.fail(comm.ErrClosed)
		return
	}
	m.comms[c.id] = c
	note, early := m.aborted[c.id]
	delete(m.aborted, c.id)
	m.mu.Unlock()
	if early {
		c.failPeer(note.world, note.cause)
		return
	}
	for _, w := range c.members {
		if w == m.rank {
			continue
		}
		if err := m.conns[w].gone(); err != nil {
			c.fail(c.peerErr(err))
			return
		}
	}
}

func (m *mesh) unregister(c *Comm) {
	m.mu.Lock()
	if m.comms[c.id] == c {
		delete(m.comms, c.id)
	}
	m.mu.Unlock()
}

// abortFrom applies an abort frame from world rank p for group id.
func (m *mesh) abortFrom(p int, id uint64, cause string) {
	m.mu.Lock()
	c := m.comms[id]
	if c == nil && !m.closed {
		if _, ok := m.aborted[id]; !ok {
			m.aborted[id] = abortNote{world: p, cause: cause}
		}
	}
	m.mu.Unlock()
	if c != nil {
		c.failPeer(p, cause)
	}
}

// lost fails every live communicator that holds world rank p, after its
// connection broke (err is a *lostError).
func (m *mesh) lost(p int, err *lostError) {
	m.mu.Lock()
	var hit []*Comm
	for _, c := range m.comms {
		if c.commRank(p) >= 0 {
			hit = append(hit, c)
		}
	}
	m.mu.Unlock()
	for _, c := range hit {
		c.fail(c.peerErr(err))
	}
}

// teardown closes the mesh: every live communicator fails with err, bye (or
// abort) frames already queued are given a moment to leave, connections
// close and every goroutine ends. It is idempotent.
func (m *mesh) teardown(err error) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	live := make([]*Comm, 0, len(m.comms))
	for _, c := range m.comms {
		live = append(live, c)
	}
	m.mu.Unlock()
	for _, c := range live {
		c.fail(err)
	}
	// Let the writers flush what is queued (bye or abort frames), then
	// half-close and read until each peer has closed its side too, briefly:
	// closing a socket with unread data resets the connection, and the
	// peer could lose the frames just sent.
	deadline := time.Now().Add(time.Second)
	for _, c := range m.conns {
		if c != nil {
			c.flush(deadline)
		}
	}
	for _, c := range m.conns {
		if c != nil {
			c.closeWrite()
		}
	}
	for _, c := range m.conns {
		if c != nil {
			select {
			case <-c.rdone:
			case <-time.After(time.Until(deadline.Add(time.Second))):
			}
		}
	}
	close(m.closing)
	for _, c := range m.conns {
		if c != nil {
			c.close()
		}
	}
	m.wg.Wait()
	// Every goroutine that used the shared memory has ended.
	for _, c := range m.conns {
		if c != nil {
			c.shm.close()
		}
	}
	return nil
}

// lostError says that the connection to a world rank is gone, and why.
type lostError struct {
	world int
	host  string
	clean bool // the peer said goodbye: it closed its communicator
	err   error
}

func (e *lostError) Error() string {
	if e.clean {
		return fmt.Sprintf("rank %d (host %s) closed its communicator", e.world, e.host)
	}
	return fmt.Sprintf("lost the connection to rank %d (host %s): %v", e.world, e.host, e.err)
}
