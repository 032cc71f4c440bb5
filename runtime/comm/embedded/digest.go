package embedded

import (
	"encoding/binary"
	"hash/fnv"
)

// The agreement's digest: a fixed-size summary of every rank's desc that
// the ranks combine by recursive doubling (quickAgree), so that the common
// case, every rank agreeing, costs log2 n exchanges of digestLen bytes
// instead of every rank's desc going to every other. Its words, each
// combined across ranks as it says:
//
//	0  ^fingerprint, by max: ^ of the least fingerprint
//	1  fingerprint, by max: the greatest
//	2  sum of pair(r, d, counts[d]) over d, by sum (alltoallv)
//	3  sum of pair(s, r, recvCounts[s]) over s, by sum (alltoallv)
//	4  1 if the rank has an error of its own, by max
//
// (r is the rank.) The fingerprint hashes every field of a desc that
// agree.Disagreement compares across ranks (see desc.fingerprint), the
// collective first; the rest of its checks are alltoallv's, that what
// rank s sends rank d is what d expects from s: the two sums are equal,
// but for a collision of the 64-bit hash pair, exactly when each send
// count is the receive count of its pair. So the digest says "agree" on
// the calls that verdict accepts, and on those only (up to collisions of
// 64-bit hashes, as the data frames' fingerprints are).
const digestLen = 5 * 8

// digestFP is the fingerprint of the digest's frames.
var digestFP = func() uint64 {
	h := fnv.New64a()
	h.Write([]byte("embedded agreement digest"))
	return h.Sum64()
}()

// putDigest writes d's digest at rank r of n into b.
func putDigest(b []byte, d *desc, r, n int) {
	c := desc{kind: d.kind, dtype: d.dtype, op: d.op, root: d.root, n: d.n, counts: d.counts}
	switch d.kind {
	case kBarrier, kSplit, kSplitLocal:
		c.dtype = 0 // which these never compare (nor carry)
	}
	fp := c.fingerprint()
	var sends, recvs uint64
	if !d.hasErr && d.kind == kAlltoallv && len(d.counts) == n && len(d.recvCounts) == n {
		for p := range n {
			sends += pair(r, p, d.counts[p])
			recvs += pair(p, r, d.recvCounts[p])
		}
	}
	var flag uint64
	if d.hasErr {
		flag = 1
	}
	for i, v := range [5]uint64{^fp, fp, sends, recvs, flag} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}

// digestAgrees reports whether a combined digest says that every rank
// agrees and none has an error of its own.
func digestAgrees(b []byte) bool {
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	return ^w(0) == w(1) && w(2) == w(3) && w(4) == 0
}

// combineDigest combines the digest src into dst.
func combineDigest(dst, src []byte) {
	for i := range 5 {
		a := binary.LittleEndian.Uint64(dst[8*i:])
		b := binary.LittleEndian.Uint64(src[8*i:])
		if i == 2 || i == 3 {
			a += b
		} else {
			a = max(a, b)
		}
		binary.LittleEndian.PutUint64(dst[8*i:], a)
	}
}

// pair hashes "rank s sends rank d n elements" (splitmix64's finalizer
// over the three).
func pair(s, d, n int) uint64 {
	return mix(mix(uint64(s)<<32^uint64(uint32(d))) ^ uint64(n))
}

// mix is splitmix64's finalizer: every bit of x affects every bit of the
// result.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// quickAgree combines this rank's digest of d with every other rank's
// (log2 n exchanges of digestLen bytes, recursive doubling) and reports
// whether they all agree and none has an error of its own: the call may
// then go ahead. Every rank gets the same answer. An error is the call's,
// already returned through finish.
func (c *Comm) quickAgree(d *desc) (bool, error) {
	b := c.dig[:]
	putDigest(b, d, c.rank, len(c.members))
	saved := c.fp
	c.fp = digestFP
	err := c.doublingBy(b, reducer{digest: true})
	c.fp = saved
	if err := c.finish(err); err != nil {
		return false, err
	}
	return digestAgrees(b), nil
}
