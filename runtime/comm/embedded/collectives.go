package embedded

import (
	"fmt"

	"github.com/gohorovod/gohorovod/internal/agree"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// Algorithm thresholds and pipelining (see doc.go for the choices).
var (
	// ringMin is the allreduce size (bytes) from which the ring is used;
	// below it, recursive doubling.
	ringMin = 256 << 10
	// chainMin is the bcast size from which the pipelined chain is used;
	// below it, a binomial tree.
	chainMin = 256 << 10
	// bruckMax is the allgatherv total size up to which Bruck's algorithm
	// runs; above it, the ring. BenchmarkAllgatherv over Unix sockets
	// measured the two even at 128 KiB at np 8 (Bruck's 20-40% faster
	// below, the ring ahead from 256 KiB), Bruck's ahead up to 256 KiB at
	// np 4.
	bruckMax = 128 << 10
	// pieceBytes is the unit of pipelining of the ring and the chain.
	pieceBytes = 512 << 10
	// window is how many pieces a rank has receives posted for ahead of
	// the one it works on.
	window = 4
)

func mod(a, n int) int { return ((a % n) + n) % n }

// Allreduce combines buf across ranks with op, in place. Below 256 KiB it
// runs recursive doubling (log2 n exchanges of the whole buffer; the ranks
// beyond a power of two fold into a partner first and get the result back
// at the end); from 256 KiB, a pipelined ring: a reduce-scatter, after which
// rank r owns the fully reduced block r, then an allgather, both in pieces
// of 512 KiB so that sending, receiving and reducing overlap. Every element
// is combined in one fixed order that does not depend on the rank computing
// it (in recursive doubling both partners compute op(lower, higher); in the
// ring each block is reduced once, along the ring, and then copied), so the
// result is identical, bit for bit, on every rank. SetAlgorithms can force
// either whatever the size.
func (c *Comm) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	d, err := c.start(agree.Args{Kind: agree.Allreduce, Send: buf, Op: op})
	if err != nil {
		return err
	}
	b := buf.Bytes()
	if len(c.members) == 1 {
		return nil
	}
	esz := d.dtype.Size()
	if c.allreduceRing(len(b), esz) {
		return c.finish(c.ring(b, c.evenBlocks(len(b)/esz, esz), d.dtype, op, true, true))
	}
	return c.finish(c.doubling(b, d.dtype, op))
}

// allreduceRing reports whether an allreduce of size bytes, of elements
// of esz bytes, runs the ring (else recursive doubling): the one forced,
// or by size; the ring needs an element per rank.
func (c *Comm) allreduceRing(size, esz int) bool {
	if size/esz < len(c.members) {
		return false
	}
	switch c.algo.Allreduce {
	case Ring:
		return true
	case Doubling:
		return false
	}
	return size >= ringMin
}

// reducer combines two buffers of an allreduce: with op on elements of
// dt, or as the agreement's digests.
type reducer struct {
	dt     tensor.DType
	op     tensor.ReduceOp
	digest bool
}

// combine stores op(dst, src) in dst.
func (f reducer) combine(dst, src []byte) {
	if f.digest {
		combineDigest(dst, src)
		return
	}
	tensor.Reduce(f.dt, f.op, dst, src)
}

// doubling is recursive-doubling allreduce.
func (c *Comm) doubling(b []byte, dt tensor.DType, op tensor.ReduceOp) error {
	return c.doublingBy(b, reducer{dt: dt, op: op})
}

// doublingBy is recursive-doubling allreduce with f.
func (c *Comm) doublingBy(b []byte, f reducer) error {
	n, r := len(c.members), c.rank
	p := 1
	for p*2 <= n {
		p *= 2
	}
	rem := n - p
	tmp := c.scratch(len(b))
	vr := r - rem
	if r < 2*rem {
		if r%2 == 0 {
			if err := c.waitS(c.isend(r+1, b)); err != nil {
				return err
			}
			return c.waitR(c.irecv(r+1, b))
		}
		if err := c.waitR(c.irecv(r-1, tmp)); err != nil {
			return err
		}
		f.combine(tmp, b) // op(lower, higher)
		copy(b, tmp)
		vr = r / 2
	}
	for mask := 1; mask < p; mask <<= 1 {
		pv := vr ^ mask
		pr := pv + rem
		if pv < rem {
			pr = 2*pv + 1
		}
		q := c.irecv(pr, tmp)
		s := c.isend(pr, b)
		if err := c.waitR(q); err != nil {
			return err
		}
		if err := c.waitS(s); err != nil {
			return err
		}
		if vr < pv {
			f.combine(b, tmp)
		} else {
			f.combine(tmp, b)
			copy(b, tmp)
		}
	}
	if r < 2*rem {
		return c.waitS(c.isend(r-1, b))
	}
	return nil
}

// scratch returns a reusable buffer of n bytes.
func (c *Comm) scratch(n int) []byte {
	if cap(c.tmp) < n {
		c.tmp = make([]byte, n)
	}
	return c.tmp[:n]
}

// span is a range of bytes.
type span struct{ lo, hi int }

// evenBlocks splits count elements into one block per rank, sizes differing
// by one element at most.
func (c *Comm) evenBlocks(count, esz int) []span {
	n := len(c.members)
	if len(c.blocks) != n {
		c.blocks = make([]span, n)
	}
	bs := c.blocks
	for i := range bs {
		bs[i] = span{i * count / n * esz, (i + 1) * count / n * esz}
	}
	return bs
}

// countBlocks lays out blocks of counts[i] elements in rank order.
func countBlocks(counts []int, esz int) []span {
	bs := make([]span, len(counts))
	at := 0
	for i, k := range counts {
		bs[i] = span{at, at + k*esz}
		at += k * esz
	}
	return bs
}

// ringEv is one piece a rank receives from its left neighbour during the
// ring, in the order it receives them.
type ringEv struct {
	lo, hi  int  // where the piece lies in the buffer
	reduce  bool // combine it into the buffer (reduce-scatter), or land it there (allgather)
	fwd     bool // pass it on to the right neighbour afterwards
	guardEv int  // the event whose forward last read this piece's bytes, or -1
	guard   int  // index in c.outS of the send that last read them, or -1
	sent    int  // index in c.outS of this event's forward, or -1
	req     *recvReq
}

// ring runs the pipelined ring over the blocks of b: a reduce-scatter
// (rs), after which rank r holds block r fully reduced, then an allgather
// (ag) that passes the reduced blocks around. Rank r sends to r+1 and
// receives from r-1; at reduce-scatter step s it receives block r-s-2 and
// combines it into its own copy, at allgather step t it receives block
// r-t-1. Each block is cut into pieces; a piece is passed on as soon as it
// is done, so that the ring works as a pipeline, with receives posted for
// up to window pieces ahead.
func (c *Comm) ring(b []byte, blocks []span, dt tensor.DType, op tensor.ReduceOp, rs, ag bool) error {
	n, r := len(c.members), c.rank
	left, right := mod(r-1, n), mod(r+1, n)
	esz := dt.Size()
	piece := max(pieceBytes/esz*esz, esz)
	evs := c.ringPlan(b, blocks, piece, right, rs, ag)
	c.ringSlots(piece, rs)
	posted := 0
	for i := range evs {
		for posted < len(evs) && posted < i+window {
			ok, err := c.ringPost(evs, posted, b, left, dt, op)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			posted++
		}
		if posted <= i {
			return fmt.Errorf("embedded: ring: internal error: piece %d of %d could not be posted", i, len(evs))
		}
		ev := &evs[i]
		if err := c.waitR(ev.req); err != nil {
			return err
		}
		if ev.reduce && !ev.req.reduced {
			tensor.Reduce(dt, op, b[ev.lo:ev.hi], ev.req.buf)
		}
		if ev.fwd {
			c.isend(right, b[ev.lo:ev.hi])
			ev.sent = len(c.outS) - 1
		}
	}
	return nil
}

// forPieces calls f on each piece of s, of at most piece bytes, in order.
func forPieces(s span, piece int, f func(lo, hi int)) {
	for lo := s.lo; lo < s.hi; lo += piece {
		f(lo, min(lo+piece, s.hi))
	}
}

// ringPlan sends the ring's first block (as it is) to the right neighbour
// and returns the ring's events, in the order this rank receives their
// pieces (kept in c.evs, reused from call to call).
func (c *Comm) ringPlan(b []byte, blocks []span, piece, right int, rs, ag bool) []ringEv {
	n, r := len(c.members), c.rank
	raw := c.rawIdx[:0]
	first := r
	if rs {
		first = mod(r-1, n)
	}
	forPieces(blocks[first], piece, func(lo, hi int) {
		c.isend(right, b[lo:hi])
		raw = append(raw, len(c.outS)-1)
	})
	c.rawIdx = raw
	evs := c.evs[:0]
	steps := c.stepStart[:0]
	if rs {
		for s := 0; s <= n-2; s++ {
			steps = append(steps, len(evs))
			fwd := s < n-2 || ag
			forPieces(blocks[mod(r-s-2, n)], piece, func(lo, hi int) {
				evs = append(evs, ringEv{lo: lo, hi: hi, reduce: true, fwd: fwd, guardEv: -1, guard: -1, sent: -1})
			})
		}
	}
	if ag {
		for t := 0; t <= n-2; t++ {
			j := 0
			forPieces(blocks[mod(r-t-1, n)], piece, func(lo, hi int) {
				e := ringEv{lo: lo, hi: hi, fwd: t < n-2, guardEv: -1, guard: -1, sent: -1}
				// Landing the reduced piece overwrites bytes this rank sent
				// during the reduce-scatter: that send must be done first.
				if rs && t == 0 {
					e.guard = raw[j]
				} else if rs {
					e.guardEv = steps[t-1] + j
				}
				evs = append(evs, e)
				j++
			})
		}
	}
	c.evs, c.stepStart = evs, steps
	return evs
}

// ringSlots makes sure of the window's receive slots, of a piece each, that
// a reduce-scatter receives its pieces into.
func (c *Comm) ringSlots(piece int, rs bool) {
	if len(c.slots) < window {
		c.slots = make([][]byte, window)
	}
	for i := range c.slots {
		if rs && len(c.slots[i]) < piece {
			c.slots[i] = make([]byte, piece)
		}
	}
}

// ringPost posts the receive of event e from the left neighbour, once the
// send that last read its bytes is done; it reports false when that send
// has not even been started yet (the event must wait).
func (c *Comm) ringPost(evs []ringEv, e int, b []byte, left int, dt tensor.DType, op tensor.ReduceOp) (bool, error) {
	ev := &evs[e]
	if ev.guardEv >= 0 {
		if evs[ev.guardEv].sent < 0 {
			return false, nil
		}
		ev.guard = evs[ev.guardEv].sent
	}
	if ev.guard >= 0 {
		if err := c.waitS(c.outS[ev.guard]); err != nil {
			return false, err
		}
	}
	if ev.reduce {
		// Through shared memory the reader reduces the piece straight
		// from the slots into b (req.reduced); on a socket it lands in
		// a receive slot and is reduced below.
		ev.req = c.irecvReduce(left, c.slots[e%window][:ev.hi-ev.lo], b[ev.lo:ev.hi], dt, op)
	} else {
		ev.req = c.irecv(left, b[ev.lo:ev.hi])
	}
	return true, nil
}

// Bcast copies buf from root to every rank: below 256 KiB along a binomial
// tree (log2 n rounds), from 256 KiB along a pipelined chain in pieces of
// 512 KiB (root, root+1, ...), which moves each byte once per link.
func (c *Comm) Bcast(buf *tensor.Tensor, root int) error {
	d, err := c.start(agree.Args{Kind: agree.Bcast, Send: buf, Root: root})
	if err != nil {
		return err
	}
	b := buf.Bytes()
	n := len(c.members)
	if n == 1 {
		return nil
	}
	vr := mod(c.rank-root, n)
	real := func(v int) int { return (v + root) % n }
	if len(b) < chainMin {
		mask := 1
		for ; mask < n; mask <<= 1 {
			if vr&mask != 0 {
				if err := c.waitR(c.irecv(real(vr-mask), b)); err != nil {
					return c.finish(err)
				}
				break
			}
		}
		for mask >>= 1; mask > 0; mask >>= 1 {
			if vr+mask < n {
				c.isend(real(vr+mask), b)
			}
		}
		return c.finish(nil)
	}
	piece := max(pieceBytes/d.dtype.Size()*d.dtype.Size(), 1)
	next := -1
	if vr+1 < n {
		next = real(vr + 1)
	}
	if vr == 0 {
		for lo := 0; lo < len(b); lo += piece {
			c.isend(next, b[lo:min(lo+piece, len(b))])
		}
		return c.finish(nil)
	}
	prev := real(vr - 1)
	np := (len(b) + piece - 1) / piece
	reqs := c.reqs[:0]
	for j := range np {
		if j < window {
			reqs = append(reqs, c.irecv(prev, b[j*piece:min((j+1)*piece, len(b))]))
		}
	}
	for j := range np {
		if j+window < np {
			k := j + window
			reqs = append(reqs, c.irecv(prev, b[k*piece:min((k+1)*piece, len(b))]))
		}
		if err := c.waitR(reqs[j]); err != nil {
			c.reqs = reqs[:0]
			return c.finish(err)
		}
		if next >= 0 {
			c.isend(next, reqs[j].buf)
		}
	}
	clear(reqs)
	c.reqs = reqs[:0]
	return c.finish(nil)
}

// start begins a collective call with arguments a: it numbers the call,
// checks a on this rank and agrees with the other ranks (see agree); it
// returns the call's desc, or the error every rank returns.
func (c *Comm) start(a agree.Args) (desc, error) {
	if err := c.begin(); err != nil {
		return desc{}, err
	}
	d, err := c.describe(&a)
	return d, c.agree(&d, err)
}

// describe checks a on this rank (agree.Args.Check, the transports' one
// per-rank check) and returns the desc of the call.
func (c *Comm) describe(a *agree.Args) (desc, error) {
	a.Rank, a.Size = c.rank, len(c.members)
	d := desc{kind: kind(a.Kind), op: a.Op, root: int64(a.Root), counts: a.Counts, recvCounts: a.RecvCounts}
	if err := a.Check(); err != nil {
		return d, fmt.Errorf("comm: %v: %w", a.Kind, err)
	}
	d.dtype, d.n = a.Send.DType(), int64(a.Send.Len())
	return d, nil
}

// Allgatherv concatenates counts[r] elements from each rank r into recv on
// every rank: up to 128 KiB in all by Bruck's algorithm (ceil(log2
// n) rounds, each rank sending to one peer and receiving from another in
// each), above around a pipelined ring (SetAlgorithms can force either, or
// every rank sending its block straight to every other).
func (c *Comm) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	d, err := c.start(agree.Args{Kind: agree.Allgatherv, Send: send, Recv: recv, Counts: counts})
	if err != nil {
		return err
	}
	sb, rb := send.Bytes(), recv.Bytes()
	esz := d.dtype.Size()
	blocks := countBlocks(counts, esz)
	mine := blocks[c.rank]
	copy(rb[mine.lo:mine.hi], sb)
	if len(c.members) == 1 {
		return nil
	}
	switch c.allgatherAlgo(comm.Sum(counts) * esz) {
	case Ring:
		return c.finish(c.ring(rb, blocks, d.dtype, 0, false, true))
	case Direct:
		c.direct(sb, rb, blocks)
		return c.finish(nil)
	}
	return c.finish(c.bruck(rb, blocks))
}

// allgatherAlgo returns the algorithm of an allgather of size bytes in
// all: the one forced, or by size.
func (c *Comm) allgatherAlgo(size int) Algorithm {
	switch a := c.algo.Allgather; {
	case a != "" && a != Auto:
		return a
	case size > bruckMax:
		return Ring
	}
	return Bruck
}

// direct queues this rank's block for every other rank and posts the
// receive of each of theirs: n-1 messages each way, with n-1 peers.
func (c *Comm) direct(sb, rb []byte, blocks []span) {
	n := len(c.members)
	for p := range n {
		if p != c.rank {
			c.irecv(p, rb[blocks[p].lo:blocks[p].hi])
		}
	}
	for k := 1; k < n; k++ {
		c.isend((c.rank+k)%n, sb)
	}
}

// bruck is Bruck's allgather over the blocks of b, in which this rank's
// own block is already in place. After round k rank r holds the blocks r,
// r+1, ..., r+2^(k+1)-1 (mod n): in round k (distance d = 2^k) it sends
// the first m = min(d, n-d) blocks it holds to rank r-d and receives the
// m blocks from r+d on from rank r+d, straight into their places in b. A
// run of blocks that wraps past the last rank travels as two frames, an
// empty one not at all (both sides know every count). Every round
// receives from another rank and into other bytes, so all the receives
// are posted first: no frame waits at a reader for its receive.
func (c *Comm) bruck(b []byte, blocks []span) error {
	n, r := len(c.members), c.rank
	var q [2 * 64]*recvReq // two per round, at most 64 rounds
	k := 0
	for d := 1; d < n; d <<= 1 {
		from := mod(r+d, n)
		in1, in2 := blockRun(blocks, from, min(d, n-d))
		q[k], q[k+1] = c.irecvSpan(from, b, in1), c.irecvSpan(from, b, in2)
		k += 2
	}
	k = 0
	for d := 1; d < n; d <<= 1 {
		to := mod(r-d, n)
		out1, out2 := blockRun(blocks, r, min(d, n-d))
		c.isendSpan(to, b, out1)
		c.isendSpan(to, b, out2)
		for _, rq := range q[k : k+2] {
			if rq == nil {
				continue
			}
			if err := c.waitR(rq); err != nil {
				return err
			}
		}
		k += 2
	}
	return nil
}

// blockRun returns the bytes of the m blocks a, a+1, ..., a+m-1 (mod n, m
// <= n): one span, and a second where the run wraps past the last block.
func blockRun(blocks []span, a, m int) (span, span) {
	n := len(blocks)
	if a+m <= n {
		return span{blocks[a].lo, blocks[a+m-1].hi}, span{}
	}
	return span{blocks[a].lo, blocks[n-1].hi}, span{blocks[0].lo, blocks[a+m-n-1].hi}
}

// irecvSpan posts the receive of b[s.lo:s.hi] from group rank r, or
// returns nil when s is empty (no frame travels for it).
func (c *Comm) irecvSpan(r int, b []byte, s span) *recvReq {
	if s.hi == s.lo {
		return nil
	}
	return c.irecv(r, b[s.lo:s.hi])
}

// isendSpan queues b[s.lo:s.hi] for group rank r, unless s is empty.
func (c *Comm) isendSpan(r int, b []byte, s span) {
	if s.hi > s.lo {
		c.isend(r, b[s.lo:s.hi])
	}
}

// Gatherv concatenates counts[r] elements from each rank r into recv on
// root, along a binomial tree rooted there: in ranks relative to the root,
// rank v receives from its children v+1, v+2, v+4, ... (below the lowest
// bit set in v) the blocks of their subtrees, which follow its own, and
// passes the whole run on to its parent v minus that bit; the root talks
// to ceil(log2 n) ranks, every other rank to at most that many and one.
// Away from the root the runs gather in a scratch buffer.
func (c *Comm) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	d, err := c.start(agree.Args{Kind: agree.Gatherv, Send: send, Recv: recv, Counts: counts, Root: root})
	if err != nil {
		return err
	}
	t := gatherTree{n: len(c.members), root: root, blocks: countBlocks(counts, d.dtype.Size())}
	sb := send.Bytes()
	if c.rank == root {
		rb := recv.Bytes()
		own := t.blocks[root]
		copy(rb[own.lo:own.hi], sb)
		return c.finish(c.gatherFrom(&t, 0, rb))
	}
	v := mod(c.rank-root, t.n)
	low := v & -v
	end := min(v+low, t.n)
	var buf []byte
	if end == v+1 {
		buf = sb // a leaf sends its own block as it is
	} else {
		buf = c.scratch(t.off(end) - t.off(v))
		copy(buf, sb)
		if err := c.gatherFrom(&t, v, buf); err != nil {
			return c.finish(err)
		}
	}
	t.forPieces(v, end, func(p, q int) {
		c.isend(t.real(v-low), buf[t.off(p)-t.off(v):t.off(q)-t.off(v)])
	})
	return c.finish(nil)
}

// gatherTree is the layout of a gatherv's binomial tree: ranks relative to
// the root (v is group rank (v+root) mod n) and the blocks in rank order.
type gatherTree struct {
	n, root int
	blocks  []span
}

// real returns the group rank of relative rank v.
func (t *gatherTree) real(v int) int { return (v + t.root) % t.n }

// off returns where relative rank v's block starts in the blocks laid out
// in relative order (root first); off(n) is their total size.
func (t *gatherTree) off(v int) int {
	base := t.blocks[t.root].lo
	if v < t.n && t.real(v) >= t.root {
		return t.blocks[t.real(v)].lo - base
	}
	total := t.blocks[t.n-1].hi
	if v == t.n {
		return total
	}
	return total - base + t.blocks[t.real(v)].lo
}

// forPieces calls f on the runs of relative ranks [a, b) whose group
// ranks do not wrap past the last rank (one or two runs), skipping the
// runs whose blocks are empty: the frames a subtree travels in.
func (t *gatherTree) forPieces(a, b int, f func(p, q int)) {
	w := t.n - t.root // the relative rank of group rank 0
	for _, s := range [2]span{{a, min(b, w)}, {max(a, w), b}} {
		if s.lo < s.hi && t.off(s.hi) > t.off(s.lo) {
			f(s.lo, s.hi)
		}
	}
}

// gatherFrom receives, at relative rank v, the subtrees of v's children
// into buf: the root's receive buffer in rank order (v = 0), or a scratch
// buffer in relative order that starts with v's own block.
func (c *Comm) gatherFrom(t *gatherTree, v int, buf []byte) error {
	low := v & -v
	if v == 0 {
		low = t.n
	}
	first := len(c.outR)
	for mask := 1; mask < low && v+mask < t.n; mask <<= 1 {
		ch := v + mask
		t.forPieces(ch, min(ch+mask, t.n), func(p, q int) {
			if v == 0 {
				c.irecv(t.real(ch), buf[t.blocks[t.real(p)].lo:t.blocks[t.real(q-1)].hi])
				return
			}
			c.irecv(t.real(ch), buf[t.off(p)-t.off(v):t.off(q)-t.off(v)])
		})
	}
	for _, q := range c.outR[first:] {
		if err := c.waitR(q); err != nil {
			return err
		}
	}
	return nil
}

// Alltoallv sends block r of send to rank r and receives block r of recv
// from rank r: every receive is posted first, then the sends go out in the
// order rank+1, rank+2, ... (each connection has its own writer), so that
// all pairs exchange at once without deadlock.
func (c *Comm) Alltoallv(send *tensor.Tensor, sendCounts []int, recv *tensor.Tensor, recvCounts []int) error {
	const name = "alltoallv"
	d, err := c.start(agree.Args{Kind: agree.Alltoallv, Send: send, Recv: recv, Counts: sendCounts, RecvCounts: recvCounts})
	if err != nil {
		return err
	}
	sb, rb := send.Bytes(), recv.Bytes()
	esz := d.dtype.Size()
	sbl, rbl := countBlocks(sendCounts, esz), countBlocks(recvCounts, esz)
	n := len(c.members)
	for p := range n {
		if p != c.rank {
			c.irecv(p, rb[rbl[p].lo:rbl[p].hi])
		}
	}
	for k := 1; k < n; k++ {
		p := (c.rank + k) % n
		c.isend(p, sb[sbl[p].lo:sbl[p].hi])
	}
	me := c.rank
	if sbl[me].hi-sbl[me].lo != rbl[me].hi-rbl[me].lo {
		return c.finish(&comm.MismatchError{Source: "comm", Op: name, Detail: fmt.Sprintf("rank %d sends itself %d elements but expects %d", me, sendCounts[me], recvCounts[me])})
	}
	copy(rb[rbl[me].lo:rbl[me].hi], sb[sbl[me].lo:sbl[me].hi])
	return c.finish(nil)
}

// ReduceScatter combines send across ranks with op and leaves block Rank()
// of the result in recv: a pipelined ring reduce-scatter over a copy of
// send (send itself is left as it was), each block reduced once.
func (c *Comm) ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error {
	d, err := c.start(agree.Args{Kind: agree.ReduceScatter, Send: send, Recv: recv, Counts: counts, Op: op})
	if err != nil {
		return err
	}
	sb, rb := send.Bytes(), recv.Bytes()
	blocks := countBlocks(counts, d.dtype.Size())
	mine := blocks[c.rank]
	if len(c.members) == 1 {
		copy(rb, sb[mine.lo:mine.hi])
		return nil
	}
	if cap(c.work) < len(sb) {
		c.work = make([]byte, len(sb))
	}
	w := c.work[:len(sb)]
	copy(w, sb)
	if err := c.ring(w, blocks, d.dtype, op, true, false); err != nil {
		return c.finish(err)
	}
	if err := c.finish(nil); err != nil {
		return err
	}
	copy(rb, w[mine.lo:mine.hi])
	return nil
}

// Barrier returns once every rank has entered it: a dissemination barrier
// of ceil(log2 n) rounds, in round k of which rank r sends an empty frame
// to rank r+2^k and waits for the one of rank r-2^k; by the last round
// every rank has heard, directly or through others, from every rank. A
// rank hears directly from 2 ceil(log2 n) ranks at most, so a frame that a
// peer sent it before entering the barrier on another connection, an
// abort of another group say, may still be on its way when the barrier
// returns. A rank that aborts the group, or loses a peer, stops taking
// part; the ranks waiting on it through others learn of it from its abort
// frame, which goes to every member directly.
func (c *Comm) Barrier() error {
	if err := c.begin(); err != nil {
		return err
	}
	d := desc{kind: kBarrier}
	if err := c.agree(&d, nil); err != nil {
		return err
	}
	n, r := len(c.members), c.rank
	first := len(c.outR)
	for dist := 1; dist < n; dist <<= 1 {
		c.irecv(mod(r-dist, n), nil) // from a new rank each round: post all
	}
	for i, dist := 0, 1; dist < n; i, dist = i+1, dist<<1 {
		c.isend((r+dist)%n, nil)
		if err := c.waitR(c.outR[first+i]); err != nil {
			return c.finish(err)
		}
	}
	return c.finish(nil)
}

// Exchange sends send to dest and fills recv from source (comm.Exchange).
// With the agreement check on it is comm.Exchange's sparse Alltoallv,
// agreed like any collective; with the check off (as the runtime runs it,
// once it has agreed on the pairs itself) only the two messages travel,
// framed as an Alltoallv's blocks would be.
func (c *Comm) Exchange(send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error {
	if c.check {
		return comm.ExchangeAlltoallv(c, send, dest, recv, source)
	}
	if err := c.begin(); err != nil {
		return err
	}
	const name = "exchange"
	d := desc{kind: kAlltoallv}
	var sb, rb []byte
	err := comm.CheckExchange(len(c.members), send, dest, recv, source)
	if err == nil {
		sb, rb = send.Bytes(), recv.Bytes()
		d.dtype = send.DType()
	}
	self := dest == c.rank && source == c.rank
	if err == nil && self && len(sb) != len(rb) {
		err = &comm.MismatchError{Source: "comm", Op: name, Detail: fmt.Sprintf("rank %d sends itself %d elements but expects %d", c.rank, send.Len(), recv.Len())}
	}
	if err := c.agree(&d, err); err != nil {
		return err
	}
	if source != comm.NoPeer && source != c.rank {
		c.irecv(source, rb)
	}
	if dest != comm.NoPeer && dest != c.rank {
		c.isend(dest, sb)
	}
	if self {
		copy(rb, sb)
	}
	return c.finish(nil)
}

var _ comm.Exchanger = (*Comm)(nil)
