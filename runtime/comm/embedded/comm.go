package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/gohorovod/gohorovod/runtime/comm"
)

// rootID is the id of the group New makes; groups split from it get ids
// derived from their parent's (see Split).
const rootID uint64 = 1

// Comm is one rank's member of a group over the embedded transport. It
// implements comm.Communicator, comm.Aborter and comm.AgreementChecker.
// Like every Communicator it is used by one goroutine at a time; Close,
// Abort and Done may be called from any goroutine.
//
// Groups made by Split and SplitLocal share the connections of the group
// New made (their traffic is told apart by a group id in every frame). Close
// them before that one: closing it closes the connections, and the groups
// split from it fail with comm.ErrClosed. Collectives on groups that share
// ranks must be called in the same order on those ranks, as with MPI.
type Comm struct {
	m       *mesh
	id      uint64
	rank    int
	members []int      // world rank of each member, in this group's rank order
	local   []int      // group rank of each world rank, -1 for non-members
	conns   []*conn    // by group rank; nil at this rank
	inboxes []*inbox   // by group rank; nil at this rank
	root    bool       // made by New: Close tears the mesh down
	check   bool       // the agreement check (comm.AgreementChecker)
	algo    Algorithms // algorithms forced (SetAlgorithms)
	seq     uint64     // collective calls made
	splits  uint64     // splits made, for the ids of new groups
	fp      uint64     // the current call's fingerprint
	owner   *ownerRef  // NewLocalGroup's resources, on the root only

	mu     sync.Mutex
	err    error         // non-nil once torn down: what later calls get
	dead   chan struct{} // closed when torn down
	closed bool

	// Owned by the calling goroutine.
	outR  []*recvReq // this call's receives
	outS  []*sendReq // this call's sends
	freeR []*recvReq
	freeS []*sendReq
	slots [][]byte        // pipelined receive slots
	tmp   []byte          // scratch of the small-message algorithms
	work  []byte          // ReduceScatter's copy of its send buffer
	descs [][]byte        // agreement exchange buffers
	dig   [digestLen]byte // the agreement's digest (quickAgree)
	// The ring's bookkeeping, reused from call to call.
	evs       []ringEv
	stepStart []int
	rawIdx    []int
	reqs      []*recvReq
	blocks    []span
}

var (
	_ comm.Communicator     = (*Comm)(nil)
	_ comm.Aborter          = (*Comm)(nil)
	_ comm.AgreementChecker = (*Comm)(nil)
)

// ownerRef holds resources a root Comm releases at Close.
type ownerRef struct{ close func() error }

func (m *mesh) newComm(id uint64, members []int, rank int, root bool) *Comm {
	c := &Comm{
		m:       m,
		id:      id,
		rank:    rank,
		members: members,
		local:   make([]int, m.size),
		conns:   make([]*conn, len(members)),
		inboxes: make([]*inbox, len(members)),
		root:    root,
		check:   true,
		dead:    make(chan struct{}),
	}
	for i := range c.local {
		c.local[i] = -1
	}
	for r, w := range members {
		c.local[w] = r
		if r != rank {
			c.conns[r] = m.conns[w]
			c.inboxes[r] = m.conns[w].inbox(id)
		}
	}
	m.register(c)
	return c
}

// Rank returns this rank's index in the group.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks in the group.
func (c *Comm) Size() int { return len(c.members) }

// SetCheck turns the agreement check on or off (comm.AgreementChecker). With
// it on (the default for every new group), each collective first exchanges a
// small description of its arguments with every rank, so that arguments
// that disagree give a *comm.MismatchError on every rank, no data moves and
// the group stays usable. With it off, a collective costs no extra round
// trip; a disagreement that the frames reveal (their length, or the
// fingerprint of the arguments they carry) still fails the call, but then
// tears the group down, as does a rank's own invalid argument, so that no
// rank waits for ever. Every rank must make the same choice.
func (c *Comm) SetCheck(on bool) { c.check = on }

// Check reports whether the agreement check is on.
func (c *Comm) Check() bool { return c.check }

// Done returns a channel that is closed when the group is torn down on this
// rank (by Close, Abort, a lost peer or another rank's abort).
func (c *Comm) Done() <-chan struct{} { return c.dead }

// commRank returns the group rank of world rank w, or -1.
func (c *Comm) commRank(w int) int { return c.local[w] }

// fail tears the group down on this rank with err (what later calls
// return); the first reason wins. It reports whether this call decided it.
func (c *Comm) fail(err error) bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return false
	}
	c.err = err
	close(c.dead)
	c.mu.Unlock()
	for _, ib := range c.inboxes {
		if ib != nil {
			ib.kill()
		}
	}
	c.m.unregister(c)
	return true
}

// failPeer tears the group down because world rank w aborted it.
func (c *Comm) failPeer(w int, cause string) {
	c.fail(&comm.PeerError{Rank: c.commRank(w), Cause: cause})
}

// peerErr turns a lost connection into the *comm.PeerError of this group.
func (c *Comm) peerErr(err error) error {
	var le *lostError
	if errors.As(err, &le) {
		return &comm.PeerError{Rank: c.commRank(le.world), Cause: le.Error()}
	}
	return err
}

// state returns the error of a torn-down group, or nil.
func (c *Comm) state() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Abort tears the group down with cause (comm.Aborter): a small abort frame
// carrying cause's text goes to every other member (best effort), whose
// blocked and later calls return a *comm.PeerError naming this rank and that
// text; this rank's own later calls return an error that matches
// comm.ErrClosed and wraps cause. Aborting the group New made also closes
// the connections, like Close. Only the first Close or Abort of a group
// decides what its ranks see. It may be called from any goroutine.
func (c *Comm) Abort(cause error) error {
	text := ""
	if cause != nil {
		text = cause.Error()
	}
	if c.fail(&comm.AbortedError{Rank: c.rank, Cause: cause}) {
		c.sendAbort(text)
	}
	if c.root {
		return c.teardown()
	}
	return nil
}

// sendAbort tells the other members that this rank gives up on the group,
// with text: those it is connected to at once, the others when they
// connect or when they send the group a frame (see mesh.forward).
func (c *Comm) sendAbort(text string) {
	c.m.forward(c, c.m.rank, text)
}

// Connections returns the number of peers this rank is connected to: the
// groups split from the one New made share these connections, which are
// made the first time a collective needs a peer.
func (c *Comm) Connections() int {
	n := 0
	for _, cn := range c.m.conns {
		if cn != nil && cn.connected() {
			n++
		}
	}
	return n
}

// Close releases the communicator; a second Close returns nil, and other
// calls after Close return comm.ErrClosed. Closing a group made by Split or
// SplitLocal concerns this rank only (every member closes its own, as with
// MPI's MPI_Comm_free). Closing the group New made says goodbye to every
// peer, closes the connections and waits for the transport's goroutines to
// end; the peers' later calls that need this rank then fail with a
// *comm.PeerError saying that it closed its communicator, and calls on the
// groups split from it fail with comm.ErrClosed.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if !c.root {
		c.fail(comm.ErrClosed)
		return nil
	}
	if c.fail(comm.ErrClosed) {
		for _, cn := range c.conns {
			if cn != nil {
				cn.control(frameBye, c.id, 0, nil)
			}
		}
	}
	return c.teardown()
}

func (c *Comm) teardown() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	err := c.m.teardown(comm.ErrClosed)
	if c.owner != nil {
		err = errors.Join(err, c.owner.close())
	}
	return err
}

// Split partitions the group by color into new groups ordered by key and
// then by rank (see comm.Communicator). Every rank learns every rank's
// color and key (an allgather of log2 n rounds, once the agreement's
// digest shows that every rank called Split); each new group gets an id derived from this
// group's id, the number of splits made so far and the color, the same on
// every member, and shares this group's connections. A negative color
// takes part but joins no group and gets an error.
func (c *Comm) Split(color, key int) (comm.Communicator, error) {
	return c.split(kSplit, color, key)
}

// SplitLocal returns the group of ranks with this rank's Host, ordered by
// rank.
func (c *Comm) SplitLocal() (comm.Communicator, error) {
	color := -1
	host := c.m.peers[c.m.rank].Host
	for _, w := range c.members {
		if c.m.peers[w].Host == host {
			color = w // the lowest world rank on this host
			break
		}
	}
	return c.split(kSplitLocal, color, c.rank)
}

func (c *Comm) split(k kind, color, key int) (comm.Communicator, error) {
	if err := c.begin(); err != nil {
		return nil, err
	}
	c.splits++
	count := c.splits
	d := desc{kind: k, color: int64(color), key: int64(key)}
	ds, err := c.splitDescs(&d)
	if err != nil {
		return nil, err
	}
	for r, o := range ds {
		if o.kind != k {
			return nil, &comm.MismatchError{Source: "comm", Op: k.String(), Detail: fmt.Sprintf("rank %d called %v, rank %d called %v", c.rank, k, r, o.kind)}
		}
	}
	if color < 0 {
		return nil, fmt.Errorf("embedded: %v: color %d is negative; this rank joins no group", k, color)
	}
	var group []int
	for r, o := range ds {
		if o.color == int64(color) {
			group = append(group, r)
		}
	}
	slices.SortStableFunc(group, func(a, b int) int {
		if ds[a].key != ds[b].key {
			if ds[a].key < ds[b].key {
				return -1
			}
			return 1
		}
		return a - b
	})
	members := make([]int, len(group))
	me := -1
	for i, r := range group {
		members[i] = c.members[r]
		if r == c.rank {
			me = i
		}
	}
	h := fnv.New64a()
	var b [25]byte
	putU64(b[0:], c.id)
	putU64(b[8:], count)
	putU64(b[16:], uint64(color))
	b[24] = byte(k)
	h.Write(b[:])
	id := h.Sum64()
	if id == rootID {
		id++
	}
	nc := c.m.newComm(id, members, me, false)
	nc.algo = c.algo
	return nc, nil
}

// splitRecord is the size of a rank's color and key as a split gathers
// them.
const splitRecord = 16

// splitDescs returns every rank's desc of a split d (their colors and
// keys): once the agreement's digest shows that every rank called the
// same, by an allgather of each rank's color and key (Bruck's, log2 n
// rounds); otherwise by the exchange of every rank's desc with every
// other, from which the caller reports the mismatch.
func (c *Comm) splitDescs(d *desc) ([]desc, error) {
	ok, err := c.quickAgree(d)
	if err != nil {
		return nil, err
	}
	if !ok {
		ds, err := c.exchangeDescs(d, nil)
		if err != nil {
			return nil, c.finish(err)
		}
		return ds, c.finish(nil)
	}
	n := len(c.members)
	b := make([]byte, splitRecord*n)
	blocks := make([]span, n)
	for r := range blocks {
		blocks[r] = span{splitRecord * r, splitRecord * (r + 1)}
	}
	putU64(b[splitRecord*c.rank:], uint64(d.color))
	putU64(b[splitRecord*c.rank+8:], uint64(d.key))
	saved := c.fp
	c.fp = d.fingerprint()
	err = c.bruck(b, blocks)
	c.fp = saved
	if err := c.finish(err); err != nil {
		return nil, err
	}
	ds := make([]desc, n)
	for r := range ds {
		at := b[splitRecord*r:]
		ds[r] = desc{kind: d.kind, color: int64(binary.LittleEndian.Uint64(at)), key: int64(binary.LittleEndian.Uint64(at[8:]))}
	}
	return ds, nil
}
