package mpi

import (
	"github.com/gohorovod/gohorovod/internal/agree"
)

// The agreement check compares what internal/agree says the ranks of a
// call must agree on, with one small allreduce (MAX over int64) of a
// vector laid out by agreementVector. Only when that finds a difference do
// the ranks gather every rank's agree.Call, so that the mismatch is told in
// agree.Disagreement's words, the same on every transport.

// fields lists the values of call that must be equal on every rank, the
// collective first: the element count (allreduce, bcast), the dtype, the
// reduction (allreduce, reducescatter), the root (gatherv, bcast) and one
// per rank of the counts (allgatherv, gatherv, reducescatter; an alltoallv
// compares its counts with an alltoall of its own). Counts of the wrong
// length count as zeros (and the rank's own check refuses them), so that
// every rank's vector has the same length.
func fields(call agree.Call, size int) []int64 {
	fs := []int64{int64(call.Kind), int64(call.DType)}
	switch call.Kind {
	case agree.Allreduce, agree.Bcast:
		fs = append(fs, int64(call.N))
	}
	switch call.Kind {
	case agree.Allreduce, agree.ReduceScatter:
		fs = append(fs, int64(call.Op))
	case agree.Gatherv, agree.Bcast:
		fs = append(fs, int64(call.Root))
	}
	switch call.Kind {
	case agree.Allgatherv, agree.Gatherv, agree.ReduceScatter:
		ok := len(call.Counts) == size
		for r := range size {
			v := int64(0)
			if ok {
				v = int64(call.Counts[r])
			}
			fs = append(fs, v)
		}
	}
	return fs
}

// agreementVector lays out what one rank contributes to the agreement
// allreduce (MAX over int64): every field, every field negated (so that MAX
// also yields the minimum), then size-rank when this rank found a local
// error (so that MAX yields the lowest such rank), else 0, and last 1 when
// this rank found the ranks' arguments to disagree by itself (an
// alltoallv's counts), else 0.
func agreementVector(fs []int64, localErr, disagrees bool, rank, size int) []int64 {
	k := len(fs)
	v := make([]int64, 2*k+2)
	for i, f := range fs {
		v[i] = f
		v[k+i] = -f
	}
	if localErr {
		v[2*k] = int64(size - rank)
	}
	if disagrees {
		v[2*k+1] = 1
	}
	return v
}

// verdict reads the reduced agreement vector of k fields. Ranks that
// called different collectives disagree, whatever else they found; then,
// if some rank found a local error, it returns that rank (the lowest one):
// a rank's own invalid arguments are reported before a disagreement, since
// they name the rank and the cause; otherwise the ranks disagree when a
// field differs across them or a rank found them to. Every rank computes
// the same result from the same reduced vector.
func verdict(k int, reduced []int64, size int) (disagree bool, badRank int) {
	if len(reduced) != 2*k+2 {
		panic("mpi: agreement vector of the wrong length")
	}
	differs := func(i int) bool { return reduced[i] != -reduced[k+i] }
	if differs(0) {
		return true, -1
	}
	if c := reduced[2*k]; c > 0 {
		return false, size - int(c)
	}
	for i := 1; i < k; i++ {
		if differs(i) {
			return true, -1
		}
	}
	return reduced[2*k+1] != 0, -1
}

// disagreement is what the ranks of a call that disagree return, from
// every rank's call as gathered (all holds size vectors of
// agree.VectorLen(size) integers, in rank order).
func disagreement(op string, k agree.Kind, all []int64, size int) error {
	l := agree.VectorLen(size)
	d := agree.Disagreement(k, size, func(r int) agree.Call { return agree.CallOf(all[r*l:(r+1)*l], size) })
	if d == "" {
		d = "the arguments differ" // the fields differ where the calls do not: no rank can say more
	}
	return &MismatchError{Source: "mpi", Op: op, Detail: d}
}

// msgLen is the size of the buffer in which the rank that found a local
// error broadcasts its message.
const msgLen = 512

// packMsg encodes a local error into a fixed-size buffer (the text,
// truncated).
func packMsg(err error) []byte {
	b := make([]byte, msgLen)
	copy(b[:msgLen-1], err.Error())
	return b
}

// unpackMsg rebuilds, on every rank, the error that rank found.
func unpackMsg(op string, rank int, b []byte) error {
	text := b
	for i, c := range text {
		if c == 0 {
			text = text[:i]
			break
		}
	}
	return &ArgError{Op: op, Rank: rank, Msg: string(text)}
}
