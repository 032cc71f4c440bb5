package memcomm

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/internal/agree"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// GroupOptions configures an in-memory group (see NewGroupWith).
type GroupOptions struct {
	// Nodes is the number of ranks on each simulated node, in rank order:
	// Nodes{2, 2} puts ranks 0 and 1 on node 0 and ranks 2 and 3 on node 1,
	// and SplitLocal groups ranks by node. Nil means one node holding every
	// rank.
	Nodes []int
	// NodeOf, instead of Nodes, gives the simulated node of each rank, so
	// that the ranks of a node need not be consecutive: NodeOf{0, 1, 0, 1}
	// puts ranks 0 and 2 on one node and ranks 1 and 3 on another. The
	// entries are labels, any non-negative integers (ranks with equal
	// labels share a node); SplitLocal groups ranks by label, ordered by
	// rank. Nil means Nodes decides; setting both is an error.
	NodeOf []int
	// Timeout bounds how long a rank waits in a collective for the other
	// ranks to arrive. When it expires the group is torn down: every rank
	// blocked in the group, and every later call, gets an error that matches
	// both ErrTimeout and comm.ErrClosed (a *TimeoutError naming the missing
	// ranks). Zero waits for ever.
	Timeout time.Duration
}

// ErrTimeout matches the error returned when an in-memory collective waited
// longer than GroupOptions.Timeout for the other ranks.
var ErrTimeout = errors.New("comm: collective timed out")

// TimeoutError reports a collective that some ranks never reached. It
// matches ErrTimeout and comm.ErrClosed (errors.Is), because a timeout tears the
// group down.
type TimeoutError struct {
	Op      string        // the collective the waiting rank was in
	Timeout time.Duration // how long it waited
	Missing []int         // ranks that had not arrived at that step
}

// Error names the collective, the missing ranks and the timeout.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("comm: %s: ranks %v did not arrive within %v; the group is closed", e.Op, e.Missing, e.Timeout)
}

// Is reports whether target is ErrTimeout or comm.ErrClosed.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout || target == comm.ErrClosed }

// NewGroup returns the n members of a new in-memory group, one comm.Communicator
// per rank, all on one simulated node. Each member is meant to be used by
// its own goroutine. It panics if n < 1.
func NewGroup(n int) []comm.Communicator { return NewGroupWith(n, GroupOptions{}) }

// NewGroupNodes returns an in-memory group spread over len(sizes) simulated
// nodes, with sizes[i] consecutive ranks on node i; SplitLocal returns the
// ranks of one node. It panics if there is no node or a node is empty.
func NewGroupNodes(sizes ...int) []comm.Communicator {
	n := 0
	for _, s := range sizes {
		n += s
	}
	return NewGroupWith(n, GroupOptions{Nodes: sizes})
}

// NewGroupWith returns the n members of a new in-memory group configured by
// o. It panics if n < 1, if o.Nodes does not sum to n or names an empty node,
// if o.NodeOf does not have n entries or has a negative one, if both are
// set, or if o.Timeout is negative.
//
// The in-memory group runs every collective of the comm.Communicator contract on
// host tensors with the documented semantics: every rank posts its
// arguments, the last rank to arrive checks them all (a disagreement gives a
// *comm.MismatchError on every rank, a rank's own bad argument gives that error
// to that rank and a *comm.MismatchError naming it to the others) and moves the
// data, and then every rank returns. Large allreduces are reduced in
// parallel, each rank combining one slice of the buffer. Reductions combine
// the ranks' contributions as a left fold in rank order, so results are
// identical on every rank and from run to run.
//
// Close on any member tears down the whole group: ranks blocked in a
// collective return comm.ErrClosed, and so does every later call on every
// member. Every member is also a comm.Aborter: Abort(cause) on member k tears
// the group down in the same way, but every rank blocked in a collective of
// the group, and every later call on any other member, returns
// *comm.PeerError{Rank: k, Cause: cause.Error()}, and member k's own later calls
// return an error that matches comm.ErrClosed and wraps cause. The first Close,
// Abort or timeout decides what every rank sees; later ones change nothing.
// Close and Abort, unlike the collectives, may be called from any goroutine.
// Every member also has a method Done() <-chan struct{}, closed when the
// group is torn down, for tools (such as package fault) that wait on it
// outside a collective.
// Groups made by Split and SplitLocal are independent of their parent.
// Send and receive buffers must not overlap, except that the send tensor of
// Allgatherv may be this rank's own block of recv.
func NewGroupWith(n int, o GroupOptions) []comm.Communicator {
	if n < 1 {
		panic(fmt.Sprintf("memcomm: in-memory group of %d ranks", n))
	}
	if o.Timeout < 0 {
		panic(fmt.Sprintf("memcomm: negative timeout %v", o.Timeout))
	}
	node := make([]int, 0, n)
	switch {
	case o.Nodes != nil && o.NodeOf != nil:
		panic("memcomm: in-memory group with both Nodes and NodeOf")
	case o.NodeOf != nil:
		if len(o.NodeOf) != n {
			panic(fmt.Sprintf("memcomm: NodeOf has %d entries for %d ranks", len(o.NodeOf), n))
		}
		for r, l := range o.NodeOf {
			if l < 0 {
				panic(fmt.Sprintf("memcomm: rank %d of an in-memory group is on node %d; node labels are non-negative", r, l))
			}
		}
		node = append(node, o.NodeOf...)
	case o.Nodes == nil:
		node = append(node, make([]int, n)...)
	default:
		for i, s := range o.Nodes {
			if s < 1 {
				panic(fmt.Sprintf("memcomm: node %d of an in-memory group has %d ranks", i, s))
			}
			for range s {
				node = append(node, i)
			}
		}
		if len(node) != n {
			panic(fmt.Sprintf("memcomm: nodes %v hold %d ranks, not %d", o.Nodes, len(node), n))
		}
	}
	ms := newGroup(node, o.Timeout)
	out := make([]comm.Communicator, n)
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// parallelBytes is the allreduce size from which every rank reduces its own
// slice of the buffer instead of the last rank to arrive doing all the work.
// Below it one step (one wake-up) is cheaper than two.
const parallelBytes = 64 << 10

// post is what one rank contributes to one step: its arguments, borrowed
// for the duration of the call, and the outcome the leader writes back.
type post struct {
	kind       agree.Kind
	dtype      tensor.DType
	op         tensor.ReduceOp
	root       int
	n          int // elements of buf (allreduce, bcast) or send
	send, recv []byte
	counts     []int // counts, or sendCounts for alltoallv
	recvCounts []int
	color, key int
	err        error // what this rank found wrong with its own arguments

	out error    // the verdict for this rank
	sub *memComm // this rank's member of a group made by a split
}

// memGroup is the state the members of one in-memory group share.
type memGroup struct {
	size    int
	node    []int // simulated node of each rank
	timeout time.Duration
	wake    []chan struct{} // one per rank, capacity 1: "your step is done"
	done    chan struct{}   // closed when the group is torn down

	mu       sync.Mutex
	seq      uint64 // steps completed
	arrived  int
	here     []bool // which ranks have arrived at the current step
	leading  bool   // the last rank is running the current step
	closeErr error  // non-nil once torn down: what the ranks get
	aborter  int    // the rank whose Abort tore the group down, or -1
	selfErr  error  // what the aborter itself gets

	// posts[seq&1] holds the current step's arguments. Two slots let a rank
	// that has finished a step post the next one while slower ranks still
	// read the outcome of the last one; no rank can get two steps ahead.
	// (A large allreduce reads its posts up to two steps later, through
	// internal steps that post nothing.)
	posts [2][]post

	// Owned by the leader of a step.
	scratch []byte
	offs    []int

	// children are the groups split from this one: torn down with it,
	// with the same error, as the groups of a real transport that share
	// its connections are. Guarded by mu.
	children []*memGroup
}

// memComm is one member of a memGroup.
type memComm struct {
	g     *memGroup
	rank  int
	timer *time.Timer // nil without a timeout
}

var _ comm.Aborter = (*memComm)(nil)

func newGroup(node []int, timeout time.Duration) []*memComm {
	n := len(node)
	g := &memGroup{
		size:    n,
		node:    node,
		timeout: timeout,
		wake:    make([]chan struct{}, n),
		done:    make(chan struct{}),
		here:    make([]bool, n),
		posts:   [2][]post{make([]post, n), make([]post, n)},
		offs:    make([]int, n),
		aborter: -1,
	}
	ms := make([]*memComm, n)
	for r := range ms {
		g.wake[r] = make(chan struct{}, 1)
		m := &memComm{g: g, rank: r}
		if timeout > 0 {
			m.timer = time.NewTimer(timeout)
			m.timer.Stop()
		}
		ms[r] = m
	}
	return ms
}

// Rank returns this member's index in the group.
func (m *memComm) Rank() int { return m.rank }

// Size returns the number of ranks in the group.
func (m *memComm) Size() int { return m.g.size }

// Close tears down the whole group (see NewGroupWith). It is idempotent.
func (m *memComm) Close() error {
	g := m.g
	g.mu.Lock()
	g.closeLocked(comm.ErrClosed)
	g.mu.Unlock()
	return nil
}

// Abort tears down the whole group, like Close, but the other ranks'
// blocked and later calls return a *comm.PeerError naming this rank and the text
// of cause, and this rank's own later calls an error matching comm.ErrClosed and
// cause (see NewGroupWith). It returns nil; if the group was already torn
// down it changes nothing.
func (m *memComm) Abort(cause error) error {
	pe := &comm.PeerError{Rank: m.rank}
	if cause != nil {
		pe.Cause = cause.Error()
	}
	g := m.g
	g.mu.Lock()
	if g.closeErr == nil {
		g.aborter = m.rank
		g.selfErr = &comm.AbortedError{Rank: m.rank, Cause: cause}
	}
	g.closeLocked(pe)
	g.mu.Unlock()
	return nil
}

// Done returns a channel that is closed when the group is torn down (by
// Close, Abort or a timeout on any member).
func (m *memComm) Done() <-chan struct{} { return m.g.done }

func (g *memGroup) closeLocked(err error) {
	if g.closeErr == nil {
		g.closeErr = err
		close(g.done)
		for _, c := range g.children {
			c.mu.Lock()
			c.closeLocked(err)
			c.mu.Unlock()
		}
		g.children = nil
	}
}

// errLocked returns what rank gets from a torn-down group.
func (g *memGroup) errLocked(rank int) error {
	if rank == g.aborter {
		return g.selfErr
	}
	return g.closeErr
}

// step posts p as this rank's contribution to the next step and waits until
// every rank has posted; the last one to arrive runs the step (checks the
// arguments, moves the data) before releasing the others. It returns the
// slot of g.posts that holds the step's posts. With p == nil the step is an
// internal barrier inside a collective that every rank has already entered;
// it ignores Close and the timeout, since every rank is bound to reach it
// (and one that left early would strand the others).
func (m *memComm) step(p *post) (slot int, err error) {
	g := m.g
	g.mu.Lock()
	if p != nil && g.closeErr != nil {
		err := g.errLocked(m.rank)
		g.mu.Unlock()
		return 0, err
	}
	seq := g.seq
	slot = int(seq & 1)
	if p != nil {
		g.posts[slot][m.rank] = *p
	}
	g.here[m.rank] = true
	g.arrived++
	if g.arrived == g.size {
		g.leading = true
		g.mu.Unlock()
		if p != nil {
			g.lead(g.posts[slot])
		}
		g.mu.Lock()
		g.leading = false
		g.arrived = 0
		clear(g.here)
		g.seq++
		g.mu.Unlock()
		for r, w := range g.wake {
			if r != m.rank {
				w <- struct{}{}
			}
		}
		return slot, nil
	}
	g.mu.Unlock()

	if p == nil {
		<-g.wake[m.rank]
		return slot, nil
	}
	var expired <-chan time.Time
	if m.timer != nil {
		m.timer.Reset(g.timeout)
		expired = m.timer.C
	}
	select {
	case <-g.wake[m.rank]:
		if m.timer != nil {
			m.timer.Stop()
		}
		return slot, nil
	case <-g.done:
		if m.timer != nil {
			m.timer.Stop()
		}
		return slot, m.abandon(seq, p.kind, false)
	case <-expired:
		return slot, m.abandon(seq, p.kind, true)
	}
}

// abandon is called when a waiting rank learns that the group was closed or
// that its timeout expired. If the step has completed, or its leader is
// already moving data into this rank's buffers, the rank waits for the step
// to finish (it will, promptly) so that no buffer is written after the call
// returns; otherwise it tears the group down (on a timeout) and returns the
// reason.
func (m *memComm) abandon(seq uint64, k agree.Kind, timedOut bool) error {
	g := m.g
	g.mu.Lock()
	if g.seq != seq || g.leading {
		g.mu.Unlock()
		<-g.wake[m.rank]
		return nil
	}
	if timedOut {
		var missing []int
		for r, ok := range g.here {
			if !ok {
				missing = append(missing, r)
			}
		}
		g.closeLocked(&TimeoutError{Op: k.String(), Timeout: g.timeout, Missing: missing})
	}
	err := g.errLocked(m.rank)
	g.mu.Unlock()
	return err
}

// finish runs a one-step collective and returns this rank's verdict.
func (m *memComm) finish(p *post) error {
	slot, err := m.step(p)
	if err != nil {
		return err
	}
	return m.g.posts[slot][m.rank].out
}

// post checks a on this rank (agree.Args.Check, the transports' one
// per-rank check) and returns the post that carries it to the step.
func (m *memComm) post(a agree.Args) post {
	a.Rank, a.Size = m.rank, m.g.size
	p := post{kind: a.Kind, op: a.Op, root: a.Root, counts: a.Counts, recvCounts: a.RecvCounts}
	if err := a.Check(); err != nil {
		p.err = fmt.Errorf("comm: %v: %w", a.Kind, err)
		return p
	}
	p.dtype, p.n, p.send = a.Send.DType(), a.Send.Len(), a.Send.Bytes()
	if a.Recv != nil && (a.Kind != agree.Gatherv || a.Root == m.rank) {
		p.recv = a.Recv.Bytes()
	}
	return p
}

// Allreduce combines buf across ranks with op, in place.
func (m *memComm) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	p := m.post(agree.Args{Kind: agree.Allreduce, Send: buf, Op: op})
	slot, err := m.step(&p)
	if err != nil {
		return err
	}
	g := m.g
	if err := g.posts[slot][m.rank].out; err != nil {
		return err
	}
	b := p.send
	if g.size == 1 || len(b) < parallelBytes {
		return nil // the leader did it all
	}
	// Every rank folds its slice of every rank's buffer into rank 0's
	// buffer (the left fold in rank order, in place: only this rank reads
	// or writes this slice now); once all slices are done, the other ranks
	// copy the result out of rank 0's buffer, and rank 0 waits for them
	// before it may return and reuse its buffer.
	esz := p.dtype.Size()
	lo := p.n * m.rank / g.size * esz
	hi := p.n * (m.rank + 1) / g.size * esz
	ps := g.posts[slot]
	acc := ps[0].send[lo:hi]
	for r := 1; r < g.size; r++ {
		tensor.Reduce(p.dtype, op, acc, ps[r].send[lo:hi])
	}
	if _, err := m.step(nil); err != nil {
		return err
	}
	if m.rank != 0 {
		copy(b, ps[0].send)
	}
	_, err = m.step(nil)
	return err
}

// Allgatherv concatenates counts[r] elements from each rank r into recv.
func (m *memComm) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	p := m.post(agree.Args{Kind: agree.Allgatherv, Send: send, Recv: recv, Counts: counts})
	return m.finish(&p)
}

// Gatherv concatenates counts[r] elements from each rank r into recv on root.
func (m *memComm) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	p := m.post(agree.Args{Kind: agree.Gatherv, Send: send, Recv: recv, Counts: counts, Root: root})
	return m.finish(&p)
}

// Bcast copies buf from root to every rank.
func (m *memComm) Bcast(buf *tensor.Tensor, root int) error {
	p := m.post(agree.Args{Kind: agree.Bcast, Send: buf, Root: root})
	return m.finish(&p)
}

// Alltoallv sends block r of send to rank r and receives block r of recv
// from rank r.
func (m *memComm) Alltoallv(send *tensor.Tensor, sendCounts []int, recv *tensor.Tensor, recvCounts []int) error {
	p := m.post(agree.Args{Kind: agree.Alltoallv, Send: send, Recv: recv, Counts: sendCounts, RecvCounts: recvCounts})
	return m.finish(&p)
}

// ReduceScatter combines send across ranks with op and leaves block Rank()
// of the result in recv.
func (m *memComm) ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error {
	p := m.post(agree.Args{Kind: agree.ReduceScatter, Send: send, Recv: recv, Counts: counts, Op: op})
	return m.finish(&p)
}

// Barrier returns once every rank has entered it.
func (m *memComm) Barrier() error {
	return m.finish(&post{kind: agree.Barrier})
}

// Split partitions the group by color into new, independent groups ordered
// by key and then by rank. A negative color joins no group and gets an
// error; the other ranks still get their groups.
func (m *memComm) Split(color, key int) (comm.Communicator, error) {
	return m.split(&post{kind: agree.Split, color: color, key: key})
}

// SplitLocal returns the ranks on this rank's simulated node, as a new,
// independent group ordered by rank.
func (m *memComm) SplitLocal() (comm.Communicator, error) {
	return m.split(&post{kind: agree.SplitLocal})
}

func (m *memComm) split(p *post) (comm.Communicator, error) {
	slot, err := m.step(p)
	if err != nil {
		return nil, err
	}
	q := &m.g.posts[slot][m.rank]
	if q.out != nil {
		return nil, q.out
	}
	return q.sub, nil
}

// lead runs a step on the last rank to arrive, while every other rank waits:
// it checks the posts against each other, writes each rank's verdict, and,
// when they agree, moves the data.
func (g *memGroup) lead(ps []post) {
	for i := range ps {
		ps[i].out, ps[i].sub = nil, nil
	}
	if g.check(ps) {
		return
	}
	p0 := &ps[0]
	esz := p0.dtype.Size()
	switch p0.kind {
	case agree.Allreduce:
		nb := p0.n * esz
		if g.size == 1 || nb == 0 {
			return
		}
		if nb >= parallelBytes {
			return // the ranks reduce their slices once released
		}
		acc := p0.send
		for r := 1; r < g.size; r++ {
			tensor.Reduce(p0.dtype, p0.op, acc, ps[r].send)
		}
		for r := 1; r < g.size; r++ {
			copy(ps[r].send, acc)
		}
	case agree.Allgatherv:
		for d := range ps {
			gatherInto(ps[d].recv, ps, esz)
		}
	case agree.Gatherv:
		gatherInto(ps[p0.root].recv, ps, esz)
	case agree.Bcast:
		src := ps[p0.root].send
		for r := range ps {
			if r != p0.root {
				copy(ps[r].send, src)
			}
		}
	case agree.Alltoallv:
		// Receiver d takes block d of every sender s; g.offs[s] walks
		// through sender s's blocks in order.
		clear(g.offs)
		for d := range ps {
			at := 0
			for s := range ps {
				c := ps[s].counts[d] * esz
				copy(ps[d].recv[at:at+c], ps[s].send[g.offs[s]:g.offs[s]+c])
				at += c
				g.offs[s] += c
			}
		}
	case agree.ReduceScatter:
		nb := comm.Sum(p0.counts) * esz
		acc := g.grow(nb)
		copy(acc, p0.send)
		for r := 1; r < g.size; r++ {
			tensor.Reduce(p0.dtype, p0.op, acc, ps[r].send)
		}
		at := 0
		for r := range ps {
			c := p0.counts[r] * esz
			copy(ps[r].recv[:c], acc[at:at+c])
			at += c
		}
	case agree.Barrier:
	case agree.Split:
		g.split(ps, func(r int) int { return ps[r].color }, func(a, b int) int {
			if ps[a].key != ps[b].key {
				return ps[a].key - ps[b].key
			}
			return a - b
		})
	case agree.SplitLocal:
		g.split(ps, func(r int) int { return g.node[r] }, func(a, b int) int { return a - b })
	}
}

// gatherInto concatenates every rank's send block into dst.
func gatherInto(dst []byte, ps []post, esz int) {
	at := 0
	for s := range ps {
		c := ps[s].counts[s] * esz
		copy(dst[at:at+c], ps[s].send[:c])
		at += c
	}
}

// grow returns the scratch buffer resized to n bytes, reallocating only
// when it must grow.
func (g *memGroup) grow(n int) []byte {
	if cap(g.scratch) < n {
		g.scratch = make([]byte, n)
	}
	g.scratch = g.scratch[:n]
	return g.scratch
}

// split makes one new group per color, members ordered by cmp, and hands
// each rank its member.
func (g *memGroup) split(ps []post, color func(r int) int, cmp func(a, b int) int) {
	byColor := map[int][]int{}
	for r := range ps {
		c := color(r)
		if c < 0 {
			ps[r].out = fmt.Errorf("comm: split: color %d is negative; this rank joins no group", c)
			continue
		}
		byColor[c] = append(byColor[c], r)
	}
	for _, members := range byColor {
		slices.SortFunc(members, cmp)
		node := make([]int, len(members))
		for i, r := range members {
			node[i] = g.node[r]
		}
		sub := newGroup(node, g.timeout)
		for i, r := range members {
			ps[r].sub = sub[i]
		}
		g.mu.Lock()
		if g.closeErr == nil {
			// Drop the children closed since (a runtime's process
			// sets come and go).
			g.children = slices.DeleteFunc(g.children, func(c *memGroup) bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.closeErr != nil
			})
			g.children = append(g.children, sub[0].g)
		}
		g.mu.Unlock()
	}
}

// check compares the posts of one step and writes a verdict for every rank
// when something is wrong, reporting whether it did.
func (g *memGroup) check(ps []post) bool {
	p0 := &ps[0]
	if d := agree.Kinds(len(ps), func(r int) agree.Kind { return ps[r].kind }); d != "" {
		for i := range ps {
			ps[i].out = &comm.MismatchError{Source: "comm", Op: ps[i].kind.String(), Detail: d}
		}
		return true
	}
	op := p0.kind.String()
	for r := range ps {
		if ps[r].err != nil {
			mm := &comm.MismatchError{Source: "comm", Op: op, Detail: fmt.Sprintf("rank %d: %v", r, ps[r].err)}
			for i := range ps {
				ps[i].out = ps[i].err
				if ps[i].out == nil {
					ps[i].out = mm
				}
			}
			return true
		}
	}
	if d := disagreement(p0.kind, ps); d != "" {
		mm := &comm.MismatchError{Source: "comm", Op: op, Detail: d}
		for i := range ps {
			ps[i].out = mm
		}
		return true
	}
	return false
}

// disagreement returns what disagrees across the ranks' (individually valid)
// arguments, or "".
func disagreement(k agree.Kind, ps []post) string {
	return agree.Disagreement(k, len(ps), func(r int) agree.Call {
		p := &ps[r]
		return agree.Call{Kind: p.kind, DType: p.dtype, Op: p.op, N: p.n, Counts: p.counts, RecvCounts: p.recvCounts, Root: p.root}
	})
}
