package embedded

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/gohorovod/gohorovod/internal/agree"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// kind names a collective.
type kind uint8

// The collectives carry agree.Kind's numbering; kCheck, the frames of the
// agreement exchange itself, is the transport's own.
const (
	kAllreduce     = kind(agree.Allreduce)
	kAllgatherv    = kind(agree.Allgatherv)
	kGatherv       = kind(agree.Gatherv)
	kBcast         = kind(agree.Bcast)
	kAlltoallv     = kind(agree.Alltoallv)
	kReduceScatter = kind(agree.ReduceScatter)
	kBarrier       = kind(agree.Barrier)
	kSplit         = kind(agree.Split)
	kSplitLocal    = kind(agree.SplitLocal)
	kCheck         = kSplitLocal + 1
)

func (k kind) String() string {
	if k == kCheck {
		return "agreement check"
	}
	if agree.Kind(k).Valid() {
		return agree.Kind(k).String()
	}
	return fmt.Sprintf("collective %d", k)
}

// desc describes one rank's arguments to one collective: what the agreement
// exchange carries and what the fingerprint in every data frame hashes.
type desc struct {
	kind       kind
	dtype      tensor.DType
	op         tensor.ReduceOp
	root       int64
	n          int64 // elements of buf (allreduce, bcast)
	color, key int64 // split
	counts     []int // counts, or sendCounts for alltoallv
	recvCounts []int // alltoallv
	errText    string
	hasErr     bool
}

const descFixed = 48

// maxErrText bounds a rank's own error as the exchange carries it.
const maxErrText = 512

func putU64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }

// encode appends d's wire form to b.
func (d *desc) encode(b []byte) []byte {
	var f [descFixed]byte
	f[0], f[1], f[2] = byte(d.kind), byte(d.dtype), byte(d.op)
	if d.hasErr {
		f[3] = 1
	}
	binary.LittleEndian.PutUint32(f[4:], uint32(len(d.counts)))
	putU64(f[8:], uint64(d.root))
	putU64(f[16:], uint64(d.n))
	putU64(f[24:], uint64(d.color))
	putU64(f[32:], uint64(d.key))
	binary.LittleEndian.PutUint32(f[40:], uint32(len(d.recvCounts)))
	binary.LittleEndian.PutUint32(f[44:], uint32(len(d.errText)))
	b = append(b, f[:]...)
	for _, v := range d.counts {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	for _, v := range d.recvCounts {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return append(b, d.errText...)
}

// decode reads a desc from b (a peer's bytes: every length is checked).
func decodeDesc(b []byte) (desc, error) {
	var d desc
	if len(b) < descFixed {
		return d, fmt.Errorf("agreement message of %d bytes", len(b))
	}
	d.kind, d.dtype, d.op, d.hasErr = kind(b[0]), tensor.DType(b[1]), tensor.ReduceOp(b[2]), b[3] == 1
	nc := int(binary.LittleEndian.Uint32(b[4:]))
	d.root = int64(binary.LittleEndian.Uint64(b[8:]))
	d.n = int64(binary.LittleEndian.Uint64(b[16:]))
	d.color = int64(binary.LittleEndian.Uint64(b[24:]))
	d.key = int64(binary.LittleEndian.Uint64(b[32:]))
	nr := int(binary.LittleEndian.Uint32(b[40:]))
	ne := int(binary.LittleEndian.Uint32(b[44:]))
	rest := b[descFixed:]
	if nc < 0 || nr < 0 || ne < 0 || len(rest) != 8*(nc+nr)+ne {
		return d, fmt.Errorf("malformed agreement message")
	}
	d.counts = make([]int, nc)
	for i := range d.counts {
		d.counts[i] = int(int64(binary.LittleEndian.Uint64(rest[8*i:])))
	}
	rest = rest[8*nc:]
	d.recvCounts = make([]int, nr)
	for i := range d.recvCounts {
		d.recvCounts[i] = int(int64(binary.LittleEndian.Uint64(rest[8*i:])))
	}
	d.errText = string(rest[8*nr:])
	return d, nil
}

// fingerprint hashes what must be equal on every rank for the data frames
// of a call to match: the collective, dtype, op, element count, root and
// counts, as far as each applies.
func (d *desc) fingerprint() uint64 {
	var b [32]byte
	b[0], b[1] = byte(d.kind), byte(d.dtype)
	switch d.kind {
	case kAllreduce, kReduceScatter:
		b[2] = byte(d.op)
	}
	switch d.kind {
	case kAllreduce, kBcast:
		putU64(b[8:], uint64(d.n))
	}
	switch d.kind {
	case kBcast, kGatherv:
		putU64(b[16:], uint64(d.root))
	}
	h := fnv.New64a()
	h.Write(b[:])
	switch d.kind {
	case kAllgatherv, kGatherv, kReduceScatter:
		var c [8]byte
		for _, v := range d.counts {
			putU64(c[:], uint64(v))
			h.Write(c[:])
		}
	}
	return h.Sum64()
}

var checkFP = (&desc{kind: kCheck}).fingerprint()

// begin starts a collective call: it fails at once on a torn-down group and
// numbers the call.
func (c *Comm) begin() error {
	if err := c.state(); err != nil {
		return err
	}
	c.seq++
	return nil
}

// agree settles, before any data moves, whether the call goes ahead. With
// the check on, the ranks first combine a digest of their descs in log2 n
// exchanges (quickAgree); when it shows that they all agree and none has
// an error of its own, the call goes ahead. Otherwise every rank exchanges
// its desc (and its own error, if any) with every other and all reach the
// same verdict: nil, this rank's own error, or a *comm.MismatchError. With the check off, a rank's own error
// aborts the group (the others would otherwise wait for it for ever). On
// success it sets the fingerprint of the call's data frames.
func (c *Comm) agree(d *desc, own error) error {
	if own != nil {
		d.hasErr = true
		d.errText = own.Error()
		if len(d.errText) > maxErrText {
			d.errText = d.errText[:maxErrText]
		}
	}
	if len(c.members) == 1 {
		c.fp = d.fingerprint()
		return own
	}
	if !c.check {
		if own != nil {
			c.abortOwn(own)
			return own
		}
		c.fp = d.fingerprint()
		return nil
	}
	if ok, err := c.quickAgree(d); err != nil || ok {
		if err == nil {
			c.fp = d.fingerprint()
		}
		return err
	}
	ds, err := c.exchangeDescs(d, own)
	if err != nil {
		return c.finish(err)
	}
	if err := c.finish(nil); err != nil {
		return err
	}
	if err := verdict(d.kind, ds, own); err != nil {
		return err
	}
	c.fp = d.fingerprint()
	return nil
}

// abortOwn tears the group down for an error this rank found during a call,
// and tells the others.
func (c *Comm) abortOwn(err error) {
	if c.fail(&comm.AbortedError{Rank: c.rank, Cause: err}) {
		c.sendAbort(err.Error())
	}
}

// exchangeDescs sends d to every other rank and returns every rank's desc,
// in rank order (d itself at this rank).
func (c *Comm) exchangeDescs(d *desc, own error) ([]desc, error) {
	n := len(c.members)
	limit := descFixed + 16*n + maxErrText + 64
	if len(c.descs) != n {
		c.descs = make([][]byte, n)
	}
	mine := d.encode(c.descs[c.rank][:0])
	c.descs[c.rank] = mine
	saved := c.fp
	c.fp = checkFP
	reqs := make([]*recvReq, n)
	for r := range n {
		if r == c.rank {
			continue
		}
		if cap(c.descs[r]) < limit {
			c.descs[r] = make([]byte, limit)
		}
		reqs[r] = c.irecvUpTo(r, c.descs[r][:limit])
	}
	for r := range n {
		if r != c.rank {
			c.isend(r, mine)
		}
	}
	c.fp = saved
	out := make([]desc, n)
	out[c.rank] = *d
	for r, q := range reqs {
		if q == nil {
			continue
		}
		if err := c.waitR(q); err != nil {
			return nil, err
		}
		o, err := decodeDesc(q.buf[:q.n])
		if err != nil {
			return nil, &comm.MismatchError{Source: "comm", Op: d.kind.String(), Detail: fmt.Sprintf("rank %d: %v", r, err)}
		}
		out[r] = o
	}
	return out, nil
}

// verdict reads every rank's desc and returns the same outcome on every
// rank (this rank's own error, if it had one).
func verdict(k kind, ds []desc, own error) error {
	op := k.String()
	if d := agree.Kinds(len(ds), func(r int) agree.Kind { return agree.Kind(ds[r].kind) }); d != "" {
		return &comm.MismatchError{Source: "comm", Op: op, Detail: d}
	}
	if own != nil {
		return own
	}
	for r, d := range ds {
		if d.hasErr {
			return &comm.MismatchError{Source: "comm", Op: op, Detail: fmt.Sprintf("rank %d: %s", r, d.errText)}
		}
	}
	if d := agree.Disagreement(agree.Kind(k), len(ds), func(r int) agree.Call {
		d := &ds[r]
		return agree.Call{Kind: agree.Kind(d.kind), DType: d.dtype, Op: d.op, N: int(d.n), Counts: d.counts, RecvCounts: d.recvCounts, Root: int(d.root)}
	}); d != "" {
		return &comm.MismatchError{Source: "comm", Op: op, Detail: d}
	}
	return nil
}

// irecv posts a receive of exactly len(buf) bytes from group rank r.
func (c *Comm) irecv(r int, buf []byte) *recvReq {
	q := c.newRecv(r, buf)
	q.exact = true
	c.inboxes[r].post(q)
	return q
}

// irecvReduce posts a receive of len(buf) bytes from group rank r that,
// when the payload comes through shared memory, is reduced with op straight
// into into (the request's reduced is then set), and otherwise lands in buf
// (see recvReq.into).
func (c *Comm) irecvReduce(r int, buf, into []byte, dt tensor.DType, op tensor.ReduceOp) *recvReq {
	q := c.newRecv(r, buf)
	q.exact = true
	q.into, q.dt, q.op = into, dt, op
	c.inboxes[r].post(q)
	return q
}

// irecvUpTo posts a receive of at most len(buf) bytes from group rank r.
func (c *Comm) irecvUpTo(r int, buf []byte) *recvReq {
	q := c.newRecv(r, buf)
	c.inboxes[r].post(q)
	return q
}

func (c *Comm) newRecv(r int, buf []byte) *recvReq {
	if peerHook != nil {
		peerHook(c, r)
	}
	var q *recvReq
	if k := len(c.freeR); k > 0 {
		q = c.freeR[k-1]
		c.freeR = c.freeR[:k-1]
	} else {
		q = &recvReq{done: make(chan struct{}, 1)}
	}
	q.buf, q.exact, q.seq, q.fp, q.world = buf, false, c.seq, c.fp, c.members[r]
	c.conns[r].want()
	q.n, q.err, q.waited = 0, nil, false
	q.into, q.reduced = nil, false
	q.state.Store(stPosted)
	c.outR = append(c.outR, q)
	return q
}

// isend queues buf for group rank r.
func (c *Comm) isend(r int, buf []byte) *sendReq {
	if peerHook != nil {
		peerHook(c, r)
	}
	var s *sendReq
	if k := len(c.freeS); k > 0 {
		s = c.freeS[k-1]
		c.freeS = c.freeS[:k-1]
	} else {
		s = &sendReq{done: make(chan struct{}, 1)}
	}
	putHeader(&s.hdr, frameData, c.id, c.seq, c.fp, len(buf))
	s.buf, s.err, s.waited, s.world = buf, nil, false, c.members[r]
	s.state.Store(stPosted)
	c.outS = append(c.outS, s)
	c.conns[r].send(s)
	return s
}

// waitR waits for a receive; errDead means the group was torn down while
// waiting.
func (c *Comm) waitR(q *recvReq) error {
	if q.waited {
		return q.err
	}
	select {
	case <-q.done:
		q.waited = true
		return q.err
	case <-c.dead:
		return errDead
	}
}

// waitS waits for a send to be written.
func (c *Comm) waitS(s *sendReq) error {
	if s.waited {
		return s.err
	}
	select {
	case <-s.done:
		s.waited = true
		return s.err
	case <-c.dead:
		return errDead
	}
}

// finish ends a call's data movement. With err nil it waits for every
// request of the call and recycles them. Otherwise, or if a request fails,
// the group is torn down (the other ranks are told, unless they all saw the
// cause themselves), every request still in flight is cancelled or waited
// for, so that no buffer is touched after the call returns, and the call's
// error is returned.
func (c *Comm) finish(err error) error {
	if err == nil {
		for _, q := range c.outR {
			if err = c.waitR(q); err != nil {
				break
			}
		}
	}
	if err == nil {
		for _, s := range c.outS {
			if err = c.waitS(s); err != nil {
				break
			}
		}
	}
	if err == nil {
		c.freeR = append(c.freeR, c.outR...)
		c.freeS = append(c.freeS, c.outS...)
		clear(c.outR)
		clear(c.outS)
		c.outR, c.outS = c.outR[:0], c.outS[:0]
		return nil
	}
	ret := err
	var le *lostError
	var mm *comm.MismatchError
	switch {
	case errors.Is(err, errDead):
		ret = c.state()
	case errors.As(err, &le):
		pe := c.peerErr(le)
		c.fail(pe)
		if le.clean {
			// The peer left cleanly, so the others may still wait for this
			// rank: tell them why it gives up.
			c.sendAbort(pe.Error())
		}
		ret = c.state()
	case errors.As(err, &mm):
		c.abortOwn(err)
	default:
		c.abortOwn(err)
	}
	c.drain()
	return ret
}

// drain cancels or waits for every request of the current call; they are
// not recycled (the group is torn down).
func (c *Comm) drain() {
	for _, q := range c.outR {
		if !q.waited && !q.state.CompareAndSwap(stPosted, stCancelled) {
			<-q.done
		}
		q.waited = true
	}
	for _, s := range c.outS {
		if !s.waited && !s.state.CompareAndSwap(stPosted, stCancelled) {
			<-s.done
		}
		s.waited = true
	}
	clear(c.outR)
	clear(c.outS)
	c.outR, c.outS = c.outR[:0], c.outS[:0]
}
