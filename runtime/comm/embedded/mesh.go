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
	"sync/atomic"
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
	// Listeners are this rank's, already listening (see Listen). The group
	// accepts its peers' connections on them until the group New made is
	// closed; the caller still owns them and closes them after that.
	Listeners *Listeners
	// ConnectTimeout bounds how long New waits for the whole group to be
	// there (default 60 s); on expiry the error names the ranks, and their
	// hosts, that never connected. Until then, a connection keeps trying to
	// reach its peer; after it, for dialWindow.
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

// dialWindow is the least time a connection made after New keeps trying
// to reach its peer.
const dialWindow = 10 * time.Second

// New makes this rank's member of the group described by cfg, with the
// whole group as its ranks. Every rank calls New at about the same time
// (within ConnectTimeout).
//
// Connections are made on demand: a rank connects to a peer the first time
// a collective sends to it or receives from it (the ring's neighbours, the
// partners of recursive doubling, a tree's parent and children, an
// alltoall's every peer), so that a rank of a large job holds a few dozen
// connections, not one per rank. Whichever of two ranks needs the other
// first dials it; when both dial at once, the higher rank's connection is
// kept on both sides. Two ranks with equal Host talk over the acceptor's
// Unix socket when it has one, others over TCP (TCP_NODELAY on). Each
// connection first proves knowledge of cfg.Secret in both directions
// (secret.Handshake); a connection that fails it is closed and the mesh
// goes on. Then the dialer says which rank it is, so that each connection
// is attributed.
//
// Before it returns, New checks that the whole group is there with a
// dissemination barrier (ceil(log2 n) rounds, partners at distances 1, 2,
// 4, ...): it returns once that is done, or, when ctx ends or
// ConnectTimeout expires first, a *ConnectError naming the ranks that this
// rank waited for and that never connected. The listeners keep accepting
// until the group is closed: the caller closes them after that.
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
	m := newMesh(cfg, timeout)
	members := make([]int, n)
	for i := range members {
		members[i] = i
	}
	c := m.newComm(rootID, members, cfg.Rank, true)
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.form(fctx, timeout); err != nil {
		m.teardown(comm.ErrClosed)
		return nil, err
	}
	return c, nil
}

// newMesh makes the links to every peer (none connected yet) and starts
// accepting.
func newMesh(cfg Config, timeout time.Duration) *mesh {
	n := len(cfg.Peers)
	ctx, cancel := context.WithCancel(context.Background())
	m := &mesh{
		rank:     cfg.Rank,
		size:     n,
		peers:    slices.Clone(cfg.Peers),
		cfg:      cfg,
		formedBy: time.Now().Add(timeout),
		ctx:      ctx,
		cancel:   cancel,
		conns:    make([]*conn, n),
		comms:    map[uint64]*Comm{},
		aborted:  map[uint64]abortNote{},
		notes:    map[uint64]deadNote{},
		closing:  make(chan struct{}),
	}
	for p := range n {
		if p != cfg.Rank {
			m.conns[p] = newConn(m, p)
		}
	}
	m.acc = newAcceptor(ctx, m)
	return m
}

// form runs New's dissemination barrier over the root group, within ctx.
func (c *Comm) form(ctx context.Context, timeout time.Duration) error {
	n := len(c.members)
	c.fp = formFP
	for k := 1; k < n; k <<= 1 {
		c.seq++
		c.irecv((c.rank-k+n)%n, nil)
		c.isend((c.rank+k)%n, nil)
		if err := c.waitAll(ctx); err != nil {
			ce := c.formError(ctx, timeout, err)
			c.fail(ce)
			c.drain()
			return ce
		}
		c.finish(nil)
	}
	return nil
}

// formFP is the fingerprint of New's barrier frames.
var formFP = (&desc{kind: kBarrier, n: -1}).fingerprint()

// waitAll waits for every request of the current call, or for ctx, or for
// the group's end; on a failure it returns the first error.
func (c *Comm) waitAll(ctx context.Context) error {
	for _, q := range c.outR {
		select {
		case <-q.done:
			q.waited = true
			if q.err != nil {
				return q.err
			}
		case <-c.dead:
			return c.state()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, s := range c.outS {
		select {
		case <-s.done:
			s.waited = true
			if s.err != nil {
				return s.err
			}
		case <-c.dead:
			return c.state()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// formError describes New's failure: the ranks this rank still waited for
// and never connected, with their hosts. When the group failed because
// another rank gave up first, the wait goes on until ctx ends if such a
// rank is missing, so that every rank that waited for it names it.
func (c *Comm) formError(ctx context.Context, timeout time.Duration, err error) error {
	var missing []int
	var detail []string
	for _, q := range c.outR {
		if !q.waited {
			missing = c.notConnected(q.world, missing, &detail)
		}
	}
	for _, s := range c.outS {
		if !s.waited {
			missing = c.notConnected(s.world, missing, &detail)
		}
	}
	if len(missing) == 0 {
		return fmt.Errorf("embedded: rank %d: forming the group: %w", c.m.rank, err)
	}
	if ctx.Err() == nil {
		<-ctx.Done()
	}
	return &ConnectError{Rank: c.m.rank, Timeout: timeout, Missing: missing, Detail: strings.Join(detail, "; "), Err: ctx.Err()}
}

// notConnected adds world rank w to missing (and its description to
// detail) when it is not connected.
func (c *Comm) notConnected(w int, missing []int, detail *[]string) []int {
	cn := c.m.conns[w]
	if cn == nil || cn.connected() || slices.Contains(missing, w) {
		return missing
	}
	s := fmt.Sprintf("%d (host %s)", w, c.m.peers[w].Host)
	var le *lostError
	if err := cn.gone(); errors.As(err, &le) && le.err != nil {
		s += fmt.Sprintf(": %v", le.err)
	} else if e := cn.lastDialErr(); e != nil {
		s += fmt.Sprintf(": %v", e)
	}
	*detail = append(*detail, s)
	return append(missing, w)
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

// dial connects to rank p, retrying until it answers or ctx ends,
// authenticates, says hello and reads the peer's verdict: accepted reports
// whether the peer keeps this connection (it does not when its own dial to
// this rank wins, or one is up already). Each failed attempt's error goes
// to note.
func dial(ctx context.Context, cfg Config, p int, note func(error)) (c net.Conn, accepted bool, err error) {
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
			stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
			accepted, err = greet(c, cfg, p)
			stop()
			if err == nil {
				if !accepted {
					c.Close()
					return nil, false, nil
				}
				return c, true, nil
			}
			c.Close()
			// A refusal (the process there does not know the secret) is
			// retried too: the right rank may yet take the address.
			last = fmt.Errorf("%s %s: %w", network, addr, err)
		} else {
			last = fmt.Errorf("dial %s %s: %w", network, addr, err)
		}
		note(last)
		select {
		case <-ctx.Done():
			return nil, false, last
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// greet runs the dialer's side of a fresh connection: the handshake, the
// hello (checking that the rank that answers is want), then the verdict.
func greet(c net.Conn, cfg Config, want int) (bool, error) {
	if err := secret.Handshake(c, cfg.Secret, secret.Dialer, handshakeTimeout); err != nil {
		return false, err
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetDeadline(time.Time{})
	if err := writeHello(c, cfg.Rank, len(cfg.Peers)); err != nil {
		return false, fmt.Errorf("sending hello: %w", err)
	}
	r, size, err := readHello(c)
	if err != nil {
		return false, err
	}
	if r != want || size != len(cfg.Peers) {
		return false, fmt.Errorf("the rank at this address says it is rank %d of %d, want rank %d of %d", r, size, want, len(cfg.Peers))
	}
	var v [1]byte
	if _, err := io.ReadFull(c, v[:]); err != nil {
		return false, fmt.Errorf("reading the verdict: %w", err)
	}
	return v[0] == 1, nil
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

// connect dials c's peer in the background (c.want decided that this rank
// dials). The dial keeps trying until the group's formation deadline, or
// for dialWindow, whichever is later; then the peer counts as lost.
func (m *mesh) connect(c *conn) {
	m.dmu.Lock()
	if m.shut.Load() {
		m.dmu.Unlock()
		c.dialed(comm.ErrClosed)
		return
	}
	m.dwg.Add(1)
	m.dmu.Unlock()
	go func() {
		defer m.dwg.Done()
		deadline := m.formedBy
		if d := time.Now().Add(dialWindow); d.After(deadline) {
			deadline = d
		}
		ctx, cancel := context.WithDeadline(m.ctx, deadline)
		defer cancel()
		nc, accepted, err := dial(ctx, m.cfg, c.peer, c.noteDialErr)
		switch {
		case err != nil:
			c.dialed(err)
		case !accepted:
			c.dialed(nil) // the peer's own connection is the one that stays
		default:
			c.attach(nc)
		}
	}()
}

// acceptor accepts the peers' connections on a rank's listeners until the
// mesh is torn down.
type acceptor struct {
	m       *mesh
	wg      sync.WaitGroup
	mu      sync.Mutex
	pending map[net.Conn]bool // connections still in their handshake
	stopped bool
}

type deadliner interface {
	net.Listener
	SetDeadline(time.Time) error
}

func newAcceptor(ctx context.Context, m *mesh) *acceptor {
	a := &acceptor{m: m, pending: map[net.Conn]bool{}}
	if m.size == 1 {
		return a
	}
	for _, ln := range a.listeners() {
		ln.SetDeadline(time.Time{})
		a.wg.Go(func() { a.loop(ctx, ln) })
	}
	return a
}

func (a *acceptor) listeners() []deadliner {
	ls := a.m.cfg.Listeners
	out := []deadliner{ls.tcp}
	if ls.unix != nil {
		out = append(out, ls.unix)
	}
	return out
}

func (a *acceptor) loop(ctx context.Context, ln deadliner) {
	// Wake Accept when ctx ends.
	stopWake := context.AfterFunc(ctx, func() { ln.SetDeadline(time.Now()) })
	defer stopWake()
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

// admit authenticates one accepted connection and attaches it to its
// peer's link, or closes it: a stranger without the secret, or a confused
// peer, is turned away without disturbing the mesh, and a connection the
// link does not take (see conn.admit) is told so.
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
	m := a.m
	if err := secret.Handshake(c, m.cfg.Secret, secret.Acceptor, handshakeTimeout); err != nil {
		return
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	r, size, err := readHello(c)
	if err != nil || size != m.size || r == m.rank || r < 0 || r >= size {
		return
	}
	if err := writeHello(c, m.rank, size); err != nil {
		return
	}
	link := m.conns[r]
	take := link.admit()
	v := []byte{0}
	if take {
		v[0] = 1
	}
	if _, err := c.Write(v); err != nil || !take {
		if take {
			link.unreserve()
		}
		return
	}
	// Leave the pending set before clearing the deadline, so that stop
	// cannot set one on a connection that is already handed on.
	a.mu.Lock()
	delete(a.pending, c)
	a.mu.Unlock()
	ok = true
	c.SetDeadline(time.Time{})
	link.attach(c) // on failure it closes c and gives the place up
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
	for _, ln := range a.listeners() {
		ln.SetDeadline(time.Now())
	}
	a.wg.Wait()
	for _, ln := range a.listeners() {
		ln.SetDeadline(time.Time{})
	}
}

// abortNote remembers an abort frame for a group this rank has not made yet.
type abortNote struct {
	world int
	cause string
}

// deadNote remembers a group that this rank tore down because a rank failed
// (an abort, a lost peer): a peer that this rank was not connected to then,
// and that connects or sends the group a frame later, is told (see
// mesh.forward).
type deadNote struct {
	origin  int    // the world rank that failed
	cause   string // what the others are told
	members []int  // the group's world ranks
}

// mesh is one rank's links to every other rank, shared by the
// communicators split from the group New made.
type mesh struct {
	rank, size int
	peers      []Peer
	cfg        Config
	formedBy   time.Time // New's deadline: dials keep trying until then
	conns      []*conn   // by world rank; nil at this rank
	wg         sync.WaitGroup
	acc        *acceptor

	ctx    context.Context // ends when the mesh is torn down: dials stop
	cancel context.CancelFunc
	shut   atomic.Bool    // set when the teardown starts: nothing attaches
	dmu    sync.Mutex     // orders dials started against the teardown
	dwg    sync.WaitGroup // the dials in flight

	mu      sync.Mutex
	comms   map[uint64]*Comm     // live communicators, by id
	aborted map[uint64]abortNote // aborts received for ids not (yet) live
	notes   map[uint64]deadNote  // groups torn down because a rank failed
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
		m.failGroup(c, note.world, note.cause, &comm.PeerError{Rank: c.commRank(note.world), Cause: note.cause})
		return
	}
	for _, w := range c.members {
		if w == m.rank {
			continue
		}
		if err := m.conns[w].gone(); err != nil {
			le := err.(*lostError)
			m.failGroup(c, w, le.Error(), c.peerErr(err))
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

// abortFrom applies an abort frame for group id that reports the failure
// of world rank origin (the sender itself, or a rank it heard of).
func (m *mesh) abortFrom(origin int, id uint64, cause string) {
	m.mu.Lock()
	c := m.comms[id]
	if c == nil && !m.closed {
		if _, ok := m.aborted[id]; !ok {
			m.aborted[id] = abortNote{world: origin, cause: cause}
		}
	}
	m.mu.Unlock()
	if c != nil {
		m.failGroup(c, origin, cause, &comm.PeerError{Rank: c.commRank(origin), Cause: cause})
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
		m.failGroup(c, p, err.Error(), c.peerErr(err))
	}
}

// failGroup tears group c down with err because world rank origin failed,
// and, if this call decided it, tells the group's other members (see
// forward).
func (m *mesh) failGroup(c *Comm, origin int, cause string, err error) {
	if c.fail(err) {
		m.forward(c, origin, cause)
	}
}

// forward tells the members of group c that this rank is connected to
// that world rank origin failed, and remembers it for the others: with
// connections made on demand, a member may wait for a rank that never
// connects to origin, and hears of the failure only from the ranks it
// does talk to. Every rank forwards a group's failure once, so the news
// reaches every member that waits for another.
func (m *mesh) forward(c *Comm, origin int, cause string) {
	if len(cause) > maxCause {
		cause = cause[:maxCause]
	}
	m.mu.Lock()
	if _, ok := m.notes[c.id]; !ok {
		m.notes[c.id] = deadNote{origin: origin, cause: cause, members: c.members}
	}
	m.mu.Unlock()
	for _, w := range c.members {
		if w != m.rank && w != origin {
			m.conns[w].tell(c.id, origin, cause)
		}
	}
}

// tellNotes tells a peer that has just connected of the failed groups it
// is a member of.
func (m *mesh) tellNotes(c *conn) {
	m.mu.Lock()
	var ids []uint64
	for id, n := range m.notes {
		if n.origin != c.peer && slices.Contains(n.members, c.peer) {
			ids = append(ids, id)
		}
	}
	notes := make([]deadNote, len(ids))
	for i, id := range ids {
		notes[i] = m.notes[id]
	}
	m.mu.Unlock()
	for i, id := range ids {
		c.tell(id, notes[i].origin, notes[i].cause)
	}
}

// answerLate tells a peer that sent a frame for a group this rank tore
// down, because a rank failed, of that failure.
func (m *mesh) answerLate(c *conn, id uint64) {
	m.mu.Lock()
	n, ok := m.notes[id]
	m.mu.Unlock()
	if ok && n.origin != c.peer {
		c.tell(id, n.origin, n.cause)
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
	// No new connection from here on: stop accepting and dialing.
	m.dmu.Lock()
	m.shut.Store(true)
	m.dmu.Unlock()
	m.cancel()
	m.acc.stop()
	m.dwg.Wait()
	// Let the writers flush what is queued (bye or abort frames), then
	// half-close and read until each peer has closed its side too, briefly:
	// closing a socket with unread data resets the connection, and the
	// peer could lose the frames just sent.
	deadline := time.Now().Add(time.Second)
	up := make([]*conn, 0, len(m.conns))
	for _, c := range m.conns {
		if c != nil && c.connected() {
			up = append(up, c)
		}
	}
	for _, c := range up {
		c.flush(deadline)
	}
	for _, c := range up {
		c.closeWrite()
	}
	for _, c := range up {
		select {
		case <-c.rdone:
		case <-time.After(time.Until(deadline.Add(time.Second))):
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
	for _, c := range up {
		c.tx.unmap()
		c.rx.unmap()
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
