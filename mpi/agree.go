package mpi

import (
	"fmt"

	"github.com/gohorovod/gohorovod/internal/agree"
	"github.com/gohorovod/gohorovod/tensor"
)

// Collective codes, carried in the agreement vector so that two ranks
// calling different collectives (with vectors of the same length) are told
// so: agree.Kind's numbering and names.
const (
	opAllreduce     = int64(agree.Allreduce)
	opAllgatherv    = int64(agree.Allgatherv)
	opGatherv       = int64(agree.Gatherv)
	opBcast         = int64(agree.Bcast)
	opAlltoallv     = int64(agree.Alltoallv)
	opReduceScatter = int64(agree.ReduceScatter)
)

// field is one value that must be equal on every rank.
type field struct {
	name string
	v    int64
	show func(int64) string // how to print a value; nil prints the number
}

func collectiveField(op int64) field {
	return field{"collective", op, func(v int64) string {
		if k := agree.Kind(v); v >= 0 && v < 256 && k.Valid() {
			return k.String()
		}
		return fmt.Sprint(v)
	}}
}

func dtypeField(dt tensor.DType) field {
	return field{"dtype", int64(dt), func(v int64) string { return tensor.DType(v).String() }}
}

func reduceOpField(op tensor.ReduceOp) field {
	return field{"reduction", int64(op), func(v int64) string { return tensor.ReduceOp(v).String() }}
}

// agreementVector lays out what one rank contributes to the agreement
// allreduce (MAX over int64): every field, every field negated (so that MAX
// also yields the minimum), and, last, size-rank when this rank found a local
// error (so that MAX yields the lowest such rank), else 0.
func agreementVector(fields []field, localErr bool, rank, size int) []int64 {
	k := len(fields)
	v := make([]int64, 2*k+1)
	for i, f := range fields {
		v[i] = f.v
		v[k+i] = -f.v
	}
	if localErr {
		v[2*k] = int64(size - rank)
	}
	return v
}

// verdict reads the reduced agreement vector. If some rank found a local
// error, it returns that rank (the lowest one): a rank's own invalid
// arguments are reported first, since they name the rank and the cause.
// Otherwise it returns a *MismatchError for the first field whose values
// differ across ranks, or nothing. Every rank computes the same result from
// the same reduced vector.
func verdict(op string, fields []field, reduced []int64, size int) (mismatch error, badRank int) {
	k := len(fields)
	if len(reduced) != 2*k+1 {
		panic("mpi: agreement vector of the wrong length")
	}
	if c := reduced[2*k]; c > 0 {
		return nil, size - int(c)
	}
	for i, f := range fields {
		hi, lo := reduced[i], -reduced[k+i]
		if hi != lo {
			show := f.show
			if show == nil {
				show = func(v int64) string { return fmt.Sprint(v) }
			}
			return &MismatchError{Source: "mpi", Op: op, Detail: fmt.Sprintf("%s differs across ranks (%s to %s)", f.name, show(lo), show(hi))}, -1
		}
	}
	return nil, -1
}

// countFields makes one field per rank from a counts vector that has size
// entries; any other length yields zeros (and the caller flags a local error).
func countFields(name string, counts []int, size int) []field {
	fs := make([]field, size)
	ok := len(counts) == size
	for r := range fs {
		fs[r].name = fmt.Sprintf("%s[%d]", name, r)
		if ok {
			fs[r].v = int64(counts[r])
		}
	}
	return fs
}

// msgLen is the size of the buffer in which the rank that found a local
// error broadcasts its message.
const msgLen = 512

// packMsg encodes a local error into a fixed-size buffer (a kind byte, then
// the text, truncated): a *MismatchError keeps its kind, anything else
// travels as the text of an ArgError.
func packMsg(err error) []byte {
	b := make([]byte, msgLen)
	if m, ok := err.(*MismatchError); ok {
		b[0] = 'M'
		copy(b[1:msgLen-1], m.Detail)
	} else {
		b[0] = 'A'
		copy(b[1:msgLen-1], err.Error())
	}
	return b
}

// unpackMsg rebuilds, on every rank, the error that rank found.
func unpackMsg(op string, rank int, b []byte) error {
	text := b[1:]
	for i, c := range text {
		if c == 0 {
			text = text[:i]
			break
		}
	}
	if b[0] == 'M' {
		return &MismatchError{Source: "mpi", Op: op, Detail: string(text)}
	}
	return &ArgError{Op: op, Rank: rank, Msg: string(text)}
}

// checkCounts validates a counts vector on one rank: one non-negative entry
// per rank, all within limit (sum included). It returns the total.
func checkCounts(name string, counts []int, size, limit int) (int, error) {
	if len(counts) != size {
		return 0, fmt.Errorf("%d %s for %d ranks", len(counts), name, size)
	}
	total := 0
	for r, c := range counts {
		if c < 0 {
			return 0, fmt.Errorf("negative count %d for rank %d in %s", c, r, name)
		}
		total += c
	}
	if !fitsCounts(counts, limit) {
		return 0, fmt.Errorf("%s total %d elements, more than one MPI call can address (%d); split the collective", name, total, limit)
	}
	return total, nil
}

// checkTensor validates a buffer argument on one rank.
func checkTensor(what string, t *tensor.Tensor, dt tensor.DType) error {
	if t == nil {
		return fmt.Errorf("%s tensor is nil", what)
	}
	if t.Device().Kind != tensor.CPU {
		return fmt.Errorf("%s tensor is on %v; this MPI binding moves host memory only", what, t.Device())
	}
	if dt != tensor.Invalid && t.DType() != dt {
		return fmt.Errorf("%s dtype %v differs from %v", what, t.DType(), dt)
	}
	if !t.DType().Valid() {
		return fmt.Errorf("%s has invalid dtype %v", what, t.DType())
	}
	return nil
}

func checkRoot(root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("root %d out of range [0, %d)", root, size)
	}
	return nil
}
