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
	// directMax is the allgatherv total size up to which every rank sends
	// its block straight to every other; above it, the ring.
	directMax = 64 << 10
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
// result is identical, bit for bit, on every rank.
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
	if len(b) >= ringMin && len(b)/esz >= len(c.members) {
		return c.finish(c.ring(b, c.evenBlocks(len(b)/esz, esz), d.dtype, op, true, true))
	}
	return c.finish(c.doubling(b, d.dtype, op))
}

// doubling is recursive-doubling allreduce.
func (c *Comm) doubling(b []byte, dt tensor.DType, op tensor.ReduceOp) error {
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
		tensor.Reduce(dt, op, tmp, b) // op(lower, higher)
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
			tensor.Reduce(dt, op, b, tmp)
		} else {
			tensor.Reduce(dt, op, tmp, b)
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
// every rank: up to 64 KiB in all, every rank sends its block straight to
// every other; above, around a pipelined ring.
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
	n := len(c.members)
	if n == 1 {
		return nil
	}
	if comm.Sum(counts)*esz > directMax {
		return c.finish(c.ring(rb, blocks, d.dtype, 0, false, true))
	}
	for p := range n {
		if p != c.rank {
			c.irecv(p, rb[blocks[p].lo:blocks[p].hi])
		}
	}
	for k := 1; k < n; k++ {
		c.isend((c.rank+k)%n, sb)
	}
	return c.finish(nil)
}

// Gatherv concatenates counts[r] elements from each rank r into recv on
// root: every rank sends its block straight to the root.
func (c *Comm) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	d, err := c.start(agree.Args{Kind: agree.Gatherv, Send: send, Recv: recv, Counts: counts, Root: root})
	if err != nil {
		return err
	}
	sb := send.Bytes()
	if c.rank != root {
		c.isend(root, sb)
		return c.finish(nil)
	}
	rb := recv.Bytes()
	blocks := countBlocks(counts, d.dtype.Size())
	for p, s := range blocks {
		if p != root {
			c.irecv(p, rb[s.lo:s.hi])
		}
	}
	copy(rb[blocks[root].lo:blocks[root].hi], sb)
	return c.finish(nil)
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

// Barrier returns once every rank has entered it: every rank sends an empty
// frame to every other and waits for theirs. (A rank hears from every other
// directly, so anything a peer sent it before entering the barrier, an abort
// included, has been seen when the barrier returns.)
func (c *Comm) Barrier() error {
	if err := c.begin(); err != nil {
		return err
	}
	d := desc{kind: kBarrier}
	if err := c.agree(&d, nil); err != nil {
		return err
	}
	n := len(c.members)
	for p := range n {
		if p != c.rank {
			c.irecv(p, nil)
		}
	}
	for k := 1; k < n; k++ {
		c.isend((c.rank+k)%n, nil)
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
