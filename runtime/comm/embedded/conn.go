package embedded

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// The wire: after the handshake and the hellos, each direction of a
// connection is a sequence of frames, each a 40-byte header (little
// endian) and a payload:
//
//	kind   1 byte (frameData, frameAbort, frameBye, frameShm,
//	       frameShmRing), then 7 reserved
//	comm   8 bytes: the communicator's id
//	seq    8 bytes: the communicator's collective call number (an abort:
//	       1 + the world rank whose failure it reports, 0 for the sender)
//	fp     8 bytes: the fingerprint of the call's arguments
//	len    8 bytes: payload bytes
//
// Frames of one communicator from one peer arrive in the order the peer
// sent them, and each rank posts its receives from a peer in the same order,
// so a data frame is matched to the oldest receive posted for its
// communicator on that connection; seq, fp and len then confirm the match
// (a mismatch is an error, never a write past the receive buffer).
const hdrLen = 40

const (
	frameData  byte = 1
	frameAbort byte = 2 // payload: the cause's text
	frameBye   byte = 3 // the peer closed its communicator cleanly
	frameShm   byte = 4 // a data frame whose payload goes through shared memory (see shm.go)
	// frameShmRing carries a new shared-memory ring (its descriptor rides
	// with the frame's bytes; payload: slot size and slot count).
	frameShmRing byte = 5
)

// maxCause bounds the text an abort frame carries.
const maxCause = 4096

// maxFrame bounds any payload length a header may announce.
const maxFrame = 1 << 46

// smallWrite is the payload size up to which a frame is copied behind its
// header and written with one write; larger ones go out with writev.
const smallWrite = 32 << 10

// earlyCopyMax is the largest frame the reader keeps aside at once when its
// receive is not posted yet; a larger one waits earlyGrace for it first
// (see inbox and conn.readLoop).
const earlyCopyMax = 4 << 10

// earlyGrace is how long the reader waits for the receive of a large frame
// before keeping the frame aside.
const earlyGrace = 5 * time.Millisecond

// expired is a channel that is always ready: wait for nothing.
var expired = func() <-chan time.Time {
	ch := make(chan time.Time)
	close(ch)
	return ch
}()

// readBuf is the size of each connection's read buffer.
const readBuf = 64 << 10

// Request states: a posted request is taken by the connection's reader or
// writer, or cancelled by the communicator that posted it when the call
// fails; exactly one of the two wins.
const (
	stPosted int32 = iota
	stTaken
	stCancelled
)

// recvReq is a posted receive: the next data frame of one communicator on
// one connection lands in buf.
type recvReq struct {
	buf   []byte
	exact bool // the frame must fill buf exactly (else: at most len(buf))
	seq   uint64
	fp    uint64
	world int // the sender's world rank

	// into, when set (a reduce-scatter piece, len(into) == len(buf)): a
	// payload that comes through shared memory is reduced with op, slot by
	// slot, straight into into (reduced is then set) instead of being
	// copied into buf; one that comes on the socket lands in buf, and the
	// caller reduces it.
	into    []byte
	dt      tensor.DType
	op      tensor.ReduceOp
	reduced bool

	n      int   // bytes received
	err    error // set before done is signalled
	state  atomic.Int32
	done   chan struct{} // capacity 1: signalled once per use
	waited bool          // owned by the communicator
}

func (r *recvReq) finish(err error) {
	r.err = err
	r.done <- struct{}{}
}

// sendReq is a queued frame.
type sendReq struct {
	hdr    [hdrLen]byte
	buf    []byte
	world  int // the receiver's world rank
	err    error
	state  atomic.Int32
	done   chan struct{}
	waited bool
}

func (s *sendReq) finish(err error) {
	s.err = err
	s.done <- struct{}{}
}

func putHeader(h *[hdrLen]byte, kind byte, id, seq, fp uint64, n int) {
	*h = [hdrLen]byte{0: kind}
	binary.LittleEndian.PutUint64(h[8:], id)
	binary.LittleEndian.PutUint64(h[16:], seq)
	binary.LittleEndian.PutUint64(h[24:], fp)
	binary.LittleEndian.PutUint64(h[32:], uint64(n))
}

// inbox holds the receives posted for one communicator on one connection,
// and the frames that came before their receive (early).
//
// Communicators share each connection, so a frame at its head that waits
// for a receive holds up the frames of every other communicator behind it.
// Two goroutines working on two communicators at once (the background loop
// and the training goroutine, say) could then each wait for a frame stuck
// behind the other's: the reader stops waiting after a while and keeps the
// frame aside instead (see conn.readLoop). Posts and early frames are
// matched in arrival order, and at most one of the two queues is non-empty.
type inbox struct {
	mu     sync.Mutex
	posted []*recvReq
	head   int
	early  []earlyFrame
	ehead  int
	kick   chan struct{} // capacity 1: wakes a reader waiting for a post
	spare  [][]byte      // early frames' buffers, delivered and kept for reuse
	dead   bool          // the communicator is gone: discard its frames
	lost   error         // the connection is gone: posts fail at once (after the early frames)
}

// earlyFrame is a data frame read before its receive was posted.
type earlyFrame struct {
	seq, fp uint64
	data    []byte
}

// deliver completes r with the early frame e.
func (r *recvReq) deliver(e earlyFrame) {
	if err := r.match(e.seq, e.fp, len(e.data)); err != nil {
		r.finish(err)
		return
	}
	r.n = copy(r.buf, e.data)
	r.finish(nil)
}

// post queues r, or completes it at once with the oldest early frame, or
// fails it at once when the connection is gone.
func (ib *inbox) post(r *recvReq) {
	ib.mu.Lock()
	if ib.ehead < len(ib.early) {
		e := ib.popEarly()
		ib.mu.Unlock()
		if r.state.CompareAndSwap(stPosted, stTaken) {
			r.deliver(e)
		}
		ib.reuse(e.data)
		return
	}
	if ib.lost != nil {
		ib.mu.Unlock()
		if r.state.CompareAndSwap(stPosted, stTaken) {
			r.finish(ib.lost)
		}
		return
	}
	ib.posted = append(ib.posted, r)
	ib.mu.Unlock()
	select {
	case ib.kick <- struct{}{}:
	default:
	}
}

// maxSpare bounds the buffers an inbox keeps for early frames.
const maxSpare = 4

// buffer returns a buffer of n bytes for an early frame: a kept one when
// one is large enough, so that a peer that is often a little ahead costs
// no allocation per call.
func (ib *inbox) buffer(n int) []byte {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	for i, b := range ib.spare {
		if cap(b) >= n {
			last := len(ib.spare) - 1
			ib.spare[i], ib.spare[last] = ib.spare[last], nil
			ib.spare = ib.spare[:last]
			return b[:n]
		}
	}
	return make([]byte, n)
}

// reuse keeps a delivered early frame's buffer (small ones, a few).
func (ib *inbox) reuse(b []byte) {
	if cap(b) == 0 || cap(b) > earlyCopyMax {
		return
	}
	ib.mu.Lock()
	if len(ib.spare) < maxSpare && !ib.dead {
		ib.spare = append(ib.spare, b)
	}
	ib.mu.Unlock()
}

func (ib *inbox) popEarly() earlyFrame {
	e := ib.early[ib.ehead]
	ib.early[ib.ehead] = earlyFrame{}
	ib.ehead++
	if ib.ehead == len(ib.early) {
		ib.early, ib.ehead = ib.early[:0], 0
	}
	return e
}

// popPosted returns the oldest posted receive still wanted, or nil. The
// caller holds mu.
func (ib *inbox) popPosted() *recvReq {
	for ib.head < len(ib.posted) {
		r := ib.posted[ib.head]
		ib.posted[ib.head] = nil
		ib.head++
		if ib.head == len(ib.posted) {
			ib.posted, ib.head = ib.posted[:0], 0
		}
		if r.state.CompareAndSwap(stPosted, stTaken) {
			return r
		}
	}
	return nil
}

// take returns the oldest posted receive, waiting for one. It returns nil
// with discard set when the frame is to be discarded (the communicator is
// gone, or the mesh closes), and nil without it when wait (nil: never) fires
// first: the frame is then kept as an early frame (see keep).
func (ib *inbox) take(closing <-chan struct{}, wait <-chan time.Time) (r *recvReq, discard bool) {
	for {
		ib.mu.Lock()
		if ib.dead {
			ib.mu.Unlock()
			return nil, true
		}
		if r := ib.popPosted(); r != nil {
			ib.mu.Unlock()
			return r, false
		}
		ib.mu.Unlock()
		select {
		case <-ib.kick:
		case <-wait:
			return nil, false
		case <-closing:
			return nil, true
		}
	}
}

// keep hands an early frame to a receive posted since take gave up, or
// keeps it for the next post.
func (ib *inbox) keep(e earlyFrame) {
	ib.mu.Lock()
	if ib.dead {
		ib.mu.Unlock()
		return
	}
	if r := ib.popPosted(); r != nil {
		ib.mu.Unlock()
		r.deliver(e)
		ib.reuse(e.data)
		return
	}
	ib.early = append(ib.early, e)
	ib.mu.Unlock()
}

// kill marks the inbox's communicator gone.
func (ib *inbox) kill() {
	ib.mu.Lock()
	ib.dead = true
	ib.early, ib.ehead = nil, 0
	ib.mu.Unlock()
	select {
	case ib.kick <- struct{}{}:
	default:
	}
}

// failAll fails every posted receive and every later post with err (the
// early frames, which came before the connection went, are still
// delivered first).
func (ib *inbox) failAll(err error) {
	ib.mu.Lock()
	ib.lost = err
	ps := ib.posted[ib.head:]
	ib.posted, ib.head = nil, 0
	ib.mu.Unlock()
	for _, r := range ps {
		if r.state.CompareAndSwap(stPosted, stTaken) {
			r.finish(err)
		}
	}
}

// conn is the link to one other rank: made for every peer when the mesh
// is, connected the first time a collective sends to or receives from that
// peer (see mesh.connect), with its reader and writer goroutines from then
// on. Sends queued before that wait in sendq; receives wait in their
// inboxes.
type conn struct {
	m    *mesh
	peer int // world rank

	// Set once by attach, before the reader and writer start.
	nc   net.Conn
	br   *bufio.Reader
	unix *net.UnixConn // nc, when it is a Unix socket (rings are possible)
	fdr  *fdReader     // the reader's source, which keeps received rings

	// Owned by the writer: the ring it sends on (nil: none yet), and
	// whether making one failed (the socket carries everything then).
	tx    *shmRing
	txOff bool
	// Owned by the reader: the ring it receives on, its token buffer.
	rx  *shmRing
	tok [8]byte

	up atomic.Bool // nc is set: the connection is attached

	mu       sync.Mutex
	dialing  bool            // this rank is dialing the peer
	reserved bool            // an accepted connection is about to be attached
	told     map[uint64]bool // groups whose teardown the peer was told of
	dialErr  error           // this rank's last failed attempt to reach the peer
	inboxes  map[uint64]*inbox
	sendq    []*sendReq
	shead    int
	writing  bool
	lost     *lostError    // non-nil once the connection is gone
	kick     chan struct{} // capacity 1: wakes the writer
	closed   chan struct{} // closed by close
	rdone    chan struct{} // closed when the reader ends
	once     sync.Once
}

func newConn(m *mesh, peer int) *conn {
	return &conn{
		m:       m,
		peer:    peer,
		inboxes: map[uint64]*inbox{},
		kick:    make(chan struct{}, 1),
		closed:  make(chan struct{}),
		rdone:   make(chan struct{}),
	}
}

// want makes sure the peer is, or is being, connected: a collective is
// about to send to it or receive from it.
func (c *conn) want() {
	if c.up.Load() {
		return // every receive posted asks: the common case takes no lock
	}
	c.mu.Lock()
	if c.nc != nil || c.dialing || c.reserved || c.lost != nil {
		c.mu.Unlock()
		return
	}
	c.dialing = true
	c.mu.Unlock()
	c.m.connect(c)
}

// connected reports whether the connection is up.
func (c *conn) connected() bool { return c.up.Load() }

// admit decides whether to take a connection the peer dialed: not when
// one is up or about to be, nor when this rank is dialing the peer too and
// is the higher rank (the higher rank's dial wins, on both sides). A yes
// reserves the place until attach.
func (c *conn) admit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc != nil || c.reserved || c.lost != nil || (c.dialing && c.m.rank > c.peer) {
		return false
	}
	c.reserved = true
	return true
}

// attach makes nc the connection and starts its reader and writer; what
// was queued goes out. It reports false (and closes nc) when the mesh is
// closing or the link already failed.
func (c *conn) attach(nc net.Conn) bool {
	switch t := nc.(type) {
	case *net.TCPConn:
		t.SetNoDelay(true)
		t.SetReadBuffer(sockBuf)
		t.SetWriteBuffer(sockBuf)
		lowerRTOFloor(t)
	case *net.UnixConn:
		t.SetReadBuffer(sockBuf)
		t.SetWriteBuffer(sockBuf)
	}
	c.mu.Lock()
	c.dialing, c.reserved = false, false
	if c.nc != nil || c.lost != nil || c.m.shut.Load() {
		c.mu.Unlock()
		nc.Close()
		return false
	}
	c.nc = nc
	c.up.Store(true)
	c.unix, _ = nc.(*net.UnixConn)
	c.fdr = newFDReader(nc)
	c.br = bufio.NewReaderSize(c.fdr, readBuf)
	c.m.wg.Add(2)
	c.mu.Unlock()
	go c.readLoop()
	go c.writeLoop()
	c.m.tellNotes(c)
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return true
}

// tell sends the peer, once per group, an abort frame saying that world
// rank origin failed (see mesh.forward); a peer not connected yet is told
// when it connects (mesh.tellNotes).
func (c *conn) tell(id uint64, origin int, cause string) {
	if c.m.shut.Load() {
		return // a mesh being torn down has nothing more to say
	}
	c.mu.Lock()
	if c.nc == nil || c.told[id] {
		c.mu.Unlock()
		return
	}
	if c.told == nil {
		c.told = map[uint64]bool{}
	}
	c.told[id] = true
	c.mu.Unlock()
	c.control(frameAbort, id, uint64(origin)+1, []byte(cause))
}

// noteDialErr records a failed attempt to reach the peer.
func (c *conn) noteDialErr(err error) {
	c.mu.Lock()
	c.dialErr = err
	c.mu.Unlock()
}

// lastDialErr returns the last failed attempt to reach the peer, or nil.
func (c *conn) lastDialErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dialErr
}

// unreserve gives up a reservation whose connection could not be attached.
func (c *conn) unreserve() {
	c.mu.Lock()
	c.reserved = false
	c.mu.Unlock()
}

// dialed ends this rank's dial: refused (the peer's own dial is the one
// that stays), or failed (err: the peer is lost).
func (c *conn) dialed(err error) {
	c.mu.Lock()
	c.dialing = false
	c.mu.Unlock()
	if err != nil {
		c.fail(err, false)
	}
}

// inbox returns the inbox of communicator id, making it if need be (frames
// of a group this rank is still making may arrive before it exists).
func (c *conn) inbox(id uint64) *inbox {
	c.mu.Lock()
	defer c.mu.Unlock()
	ib := c.inboxes[id]
	if ib == nil {
		ib = &inbox{kick: make(chan struct{}, 1)}
		if c.lost != nil {
			ib.lost = c.lost
		}
		c.inboxes[id] = ib
	}
	return ib
}

// gone returns the reason the connection is gone, or nil.
func (c *conn) gone() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost == nil {
		return nil
	}
	return c.lost
}

// send queues s for the writer, or fails it at once when the connection is
// gone. The queue is unbounded: a collective never blocks on sending, so it
// always gets to post its receives, which is what keeps rings and pairwise
// exchanges free of deadlock.
func (c *conn) send(s *sendReq) {
	c.mu.Lock()
	if c.lost != nil {
		err := c.lost
		c.mu.Unlock()
		if s.state.CompareAndSwap(stPosted, stTaken) {
			s.finish(err)
		}
		return
	}
	c.sendq = append(c.sendq, s)
	up := c.nc != nil
	c.mu.Unlock()
	if !up {
		c.want()
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// fail marks the connection gone (first reason wins), fails what waits on
// it, and, unless the peer said goodbye or this rank is closing, fails
// every communicator that holds the peer.
func (c *conn) fail(err error, clean bool) {
	le := &lostError{world: c.peer, host: c.m.peers[c.peer].Host, clean: clean, err: err}
	c.mu.Lock()
	if c.lost != nil {
		c.mu.Unlock()
		return
	}
	c.lost = le
	ibs := make([]*inbox, 0, len(c.inboxes))
	for _, ib := range c.inboxes {
		ibs = append(ibs, ib)
	}
	q := c.sendq[c.shead:]
	c.sendq, c.shead = nil, 0
	c.mu.Unlock()
	for _, ib := range ibs {
		ib.failAll(le)
	}
	for _, s := range q {
		if s.state.CompareAndSwap(stPosted, stTaken) {
			s.finish(le)
		}
	}
	select {
	case <-c.m.closing:
		return
	default:
	}
	if !clean {
		c.m.lost(c.peer, le)
	}
}

// readLoop reads frames and delivers them until the connection ends.
func (c *conn) readLoop() {
	defer c.m.wg.Done()
	defer close(c.rdone)
	defer c.fdr.closeAll()
	// Once the peer's side has ended, end ours: a peer that is closing
	// waits for that (see mesh.teardown).
	defer c.closeWrite()
	var h [hdrLen]byte
	grace := time.NewTimer(time.Hour)
	grace.Stop()
	for {
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			c.fail(err, false)
			return
		}
		f := frameHeader{
			kind: h[0],
			id:   binary.LittleEndian.Uint64(h[8:]),
			seq:  binary.LittleEndian.Uint64(h[16:]),
			fp:   binary.LittleEndian.Uint64(h[24:]),
			n:    binary.LittleEndian.Uint64(h[32:]),
		}
		var err error
		switch {
		case f.n > maxFrame:
			err = fmt.Errorf("protocol error: a frame of %d bytes", f.n)
		case f.kind == frameData || f.kind == frameShm:
			err = c.dataFrame(&f, grace)
		case f.kind == frameAbort:
			err = c.abortFrame(&f)
		case f.kind == frameShmRing:
			err = c.ringFrame(&f)
		case f.kind == frameBye:
			// The peer is closing: read what is left until its end of
			// file, so that neither side closes a socket with unread data
			// (which resets the connection and can lose frames still in
			// flight, this goodbye included).
			c.fail(nil, true)
			c.br.Discard(maxFrame)
			return
		default:
			err = fmt.Errorf("protocol error: frame kind %d", f.kind)
		}
		if err != nil {
			c.fail(err, false)
			return
		}
	}
}

// frameHeader is a frame's header as read.
type frameHeader struct {
	kind        byte
	id, seq, fp uint64
	n           uint64 // the payload's length, at most maxFrame
}

// readPayload reads f's payload into dst, or discards it (dst nil).
func (c *conn) readPayload(f *frameHeader, dst []byte) error {
	if f.kind == frameShm {
		return c.readShm(dst, int(f.n), nil)
	}
	if dst == nil {
		_, err := c.br.Discard(int(f.n))
		return err
	}
	_, err := io.ReadFull(c.br, dst)
	return err
}

// dataFrame delivers a data (or shared-memory) frame to the receive posted
// for it, or keeps it until one is; an error ends the connection.
func (c *conn) dataFrame(f *frameHeader, grace *time.Timer) error {
	n := f.n
	// A small frame whose receive is not posted yet is kept at once; a
	// larger one waits a while for it (copying costs more than a short
	// wait), then is kept too: the frames behind it may be what unblocks
	// that receive (see inbox).
	ib := c.inbox(f.id)
	var wait <-chan time.Time
	if n <= earlyCopyMax {
		wait = expired
	} else {
		grace.Reset(earlyGrace)
		wait = grace.C
	}
	r, discard := ib.take(c.m.closing, wait)
	grace.Stop() // no stale tick is received after Stop (Go 1.23 timers)
	if r == nil {
		if discard {
			c.m.answerLate(c, f.id)
			return c.readPayload(f, nil)
		}
		data := ib.buffer(int(n))
		if err := c.readPayload(f, data); err != nil {
			return err
		}
		ib.keep(earlyFrame{seq: f.seq, fp: f.fp, data: data})
		return nil
	}
	if err := r.match(f.seq, f.fp, int(n)); err != nil {
		derr := c.readPayload(f, nil)
		r.finish(err)
		return derr
	}
	var err error
	if f.kind == frameShm && r.into != nil && len(r.into) == int(n) {
		err = c.readShm(r.into, int(n), r)
		r.reduced = err == nil
	} else {
		err = c.readPayload(f, r.buf[:n])
	}
	if err != nil {
		r.finish(&lostError{world: c.peer, host: c.m.peers[c.peer].Host, err: err})
		return err
	}
	r.n = int(n)
	r.finish(nil)
	return nil
}

// abortFrame passes on a peer's abort and its cause.
func (c *conn) abortFrame(f *frameHeader) error {
	if f.n > maxCause {
		return fmt.Errorf("protocol error: an abort cause of %d bytes", f.n)
	}
	b := make([]byte, f.n)
	if _, err := io.ReadFull(c.br, b); err != nil {
		return err
	}
	origin := c.peer
	if f.seq > 0 && f.seq <= uint64(c.m.size) {
		origin = int(f.seq - 1)
	}
	c.m.abortFrom(origin, f.id, string(b))
	return nil
}

// match checks a data frame's header against the receive it is matched
// with.
func (r *recvReq) match(seq, fp uint64, n int) error {
	switch {
	case seq != r.seq:
		return &comm.MismatchError{Source: "comm", Op: "collective", Detail: fmt.Sprintf("rank %d (world) is in collective call %d of this group, this rank in call %d: the ranks are out of step", r.world, seq, r.seq)}
	case fp != r.fp:
		return &comm.MismatchError{Source: "comm", Op: "collective", Detail: fmt.Sprintf("rank %d (world) called this collective with other arguments (collective, dtype, op, counts or root)", r.world)}
	case n > len(r.buf) || (r.exact && n != len(r.buf)):
		return &comm.MismatchError{Source: "comm", Op: "collective", Detail: fmt.Sprintf("rank %d (world) sent %d bytes, this rank expects %d", r.world, n, len(r.buf))}
	}
	return nil
}

// writeLoop writes queued frames until the connection closes.
func (c *conn) writeLoop() {
	defer c.m.wg.Done()
	small := make([]byte, 0, hdrLen+smallWrite)
	var arr [2][]byte
	var bufs net.Buffers // outside the loop: WriteTo takes its address
	for {
		c.mu.Lock()
		for c.shead == len(c.sendq) {
			c.sendq, c.shead = c.sendq[:0], 0
			c.writing = false
			c.mu.Unlock()
			select {
			case <-c.kick:
			case <-c.closed:
				c.drainSends()
				return
			}
			c.mu.Lock()
		}
		s := c.sendq[c.shead]
		c.sendq[c.shead] = nil
		c.shead++
		c.writing = true
		lost := c.lost
		c.mu.Unlock()
		if !s.state.CompareAndSwap(stPosted, stTaken) {
			continue // cancelled by its communicator
		}
		if lost != nil {
			s.finish(lost)
			continue
		}
		shm, err := c.ringFor(s, small)
		switch {
		case err != nil: // the socket failed making the ring
		case shm:
			hdr := s.hdr
			hdr[0] = frameShm
			err = c.writeShm(&hdr, s.buf, small)
		case len(s.buf) <= smallWrite:
			small = append(append(small[:0], s.hdr[:]...), s.buf...)
			_, err = c.nc.Write(small)
		default:
			arr[0], arr[1] = s.hdr[:], s.buf
			bufs = arr[:]
			_, err = bufs.WriteTo(c.nc)
		}
		if err != nil {
			le := &lostError{world: c.peer, host: c.m.peers[c.peer].Host, err: err}
			s.finish(le)
			c.fail(err, false)
			continue
		}
		s.finish(nil)
	}
}

// drainSends fails what is still queued when the writer stops.
func (c *conn) drainSends() {
	c.mu.Lock()
	q := c.sendq[c.shead:]
	c.sendq, c.shead = nil, 0
	c.mu.Unlock()
	for _, s := range q {
		if s.state.CompareAndSwap(stPosted, stTaken) {
			s.finish(comm.ErrClosed)
		}
	}
}

// flush waits, until deadline, for the writer to have written everything
// queued (the bye or abort frames of a closing rank).
func (c *conn) flush(deadline time.Time) {
	for time.Now().Before(deadline) {
		c.mu.Lock()
		idle := (c.shead == len(c.sendq) && !c.writing) || c.lost != nil
		c.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// control queues a control frame (abort or bye) without waiting for it,
// if the peer is connected: a peer this rank never talked to needs no
// goodbye, and hears of an abort from the ranks it does talk to (see
// mesh.forward). seq is an abort's origin (see the wire above).
func (c *conn) control(kind byte, id, seq uint64, payload []byte) {
	if !c.connected() {
		return
	}
	s := &sendReq{buf: payload, done: make(chan struct{}, 1)}
	putHeader(&s.hdr, kind, id, seq, 0, len(payload))
	c.send(s)
}

// closeWrite half-closes the connection: the peer reads what was sent, then
// end of file.
func (c *conn) closeWrite() {
	if !c.connected() {
		return
	}
	if hc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
	}
}

// close closes the connection; the reader and writer stop.
func (c *conn) close() {
	c.once.Do(func() {
		c.mu.Lock()
		nc := c.nc
		c.mu.Unlock()
		if nc != nil {
			nc.Close()
		}
		close(c.closed)
	})
}

var errDead = errors.New("embedded: communicator torn down")
