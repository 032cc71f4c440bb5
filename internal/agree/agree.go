package agree

import (
	"fmt"
	"slices"

	"github.com/gohorovod/gohorovod/tensor"
)

// Kind is a collective call.
type Kind uint8

// The collective calls. The numbering is part of the embedded transport's
// and the MPI binding's agreement messages.
const (
	Allreduce Kind = iota + 1
	Allgatherv
	Gatherv
	Bcast
	Alltoallv
	ReduceScatter
	Barrier
	Split
	SplitLocal
	numKinds
)

var kindNames = [...]string{
	Allreduce:     "allreduce",
	Allgatherv:    "allgatherv",
	Gatherv:       "gatherv",
	Bcast:         "bcast",
	Alltoallv:     "alltoallv",
	ReduceScatter: "reducescatter",
	Barrier:       "barrier",
	Split:         "split",
	SplitLocal:    "splitlocal",
}

// Valid reports whether k is a declared collective.
func (k Kind) Valid() bool { return k >= Allreduce && k < numKinds }

// String returns the collective's name ("allreduce").
func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("collective(%d)", uint8(k))
}

// Call is one rank's arguments to a collective, as far as the ranks must
// agree on them.
type Call struct {
	Kind       Kind
	DType      tensor.DType
	Op         tensor.ReduceOp // Allreduce, ReduceScatter
	N          int             // the element count: Allreduce, Bcast
	Counts     []int           // per rank: Allgatherv, Gatherv, ReduceScatter; what this rank sends each rank: Alltoallv
	RecvCounts []int           // Alltoallv: what this rank receives from each rank
	Root       int             // Gatherv, Bcast
}

// Disagreement returns what disagrees across the n ranks' calls of kind
// k, which the caller has already found individually valid (call(r) is
// rank r's), or "" when they agree: first a rank that called another
// collective, then, rank by rank, the element count or counts, the dtype,
// and the reduction or root. Every rank that runs it on the same calls
// gets the same answer, on every transport.
func Disagreement(k Kind, n int, call func(r int) Call) string {
	if d := Kinds(n, func(r int) Kind { return call(r).Kind }); d != "" {
		return d
	}
	c0 := call(0)
	for r := 1; r < n; r++ {
		c := call(r)
		switch k {
		case Allreduce, Bcast:
			if c.N != c0.N {
				return fmt.Sprintf("element counts %d (rank 0) and %d (rank %d)", c0.N, c.N, r)
			}
		case Allgatherv, Gatherv, ReduceScatter:
			if !slices.Equal(c.Counts, c0.Counts) {
				return fmt.Sprintf("counts %v (rank 0) and %v (rank %d)", c0.Counts, c.Counts, r)
			}
		}
		switch k {
		case Allreduce, Allgatherv, Gatherv, Bcast, Alltoallv, ReduceScatter:
			if c.DType != c0.DType {
				return fmt.Sprintf("dtypes %v (rank 0) and %v (rank %d)", c0.DType, c.DType, r)
			}
		}
		switch k {
		case Allreduce, ReduceScatter:
			if c.Op != c0.Op {
				return fmt.Sprintf("reductions %v (rank 0) and %v (rank %d)", c0.Op, c.Op, r)
			}
		case Gatherv, Bcast:
			if c.Root != c0.Root {
				return fmt.Sprintf("roots %d (rank 0) and %d (rank %d)", c0.Root, c.Root, r)
			}
		}
	}
	if k == Alltoallv {
		for s := range n {
			cs := call(s)
			for d := range n {
				if want := call(d).RecvCounts[s]; cs.Counts[d] != want {
					return AlltoallvDetail(s, cs.Counts[d], d, want)
				}
			}
		}
	}
	return ""
}

// Kinds returns the disagreement of n ranks of which some called another
// collective than rank 0 (kind(r) is rank r's), or "" when they all called
// the same. It comes before any other check: the ranks' other arguments
// cannot be compared then, nor their own errors trusted to be about the
// same call.
func Kinds(n int, kind func(r int) Kind) string {
	k0 := kind(0)
	for r := 1; r < n; r++ {
		if k := kind(r); k != k0 {
			return fmt.Sprintf("rank 0 called %v, rank %d called %v", k0, r, k)
		}
	}
	return ""
}

// AlltoallvDetail is the disagreement of an alltoallv whose rank s sends
// n elements to rank d, which expects want.
func AlltoallvDetail(s, n, d, want int) string {
	return fmt.Sprintf("rank %d sends %d elements to rank %d, which expects %d", s, n, d, want)
}

// MismatchError reports arguments that disagree across the ranks of one
// collective call, as every rank sees it after the agreement check.
type MismatchError struct {
	Source string // the layer that found it: "comm" (the transports) or "mpi" (the binding)
	Op     string // the collective, e.g. "allreduce"
	Detail string // what disagreed, e.g. "element counts 4 (rank 0) and 5 (rank 1)"
}

// Error implements the error interface.
func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s: %s: arguments disagree across ranks: %s", e.Source, e.Op, e.Detail)
}

// callFixed is the number of a Call's fields that Vector lays out before
// its counts.
const callFixed = 5

// VectorLen is the length of a Call's Vector in a group of size ranks.
func VectorLen(size int) int { return callFixed + 2*size }

// Vector lays c out as VectorLen(size) integers (for a transport that
// gathers every rank's call in one collective of fixed size, such as
// MPI): counts of another length than size are left out, as zeros, since
// the rank's own check refuses them.
func (c Call) Vector(size int) []int64 {
	v := make([]int64, VectorLen(size))
	v[0], v[1], v[2], v[3], v[4] = int64(c.Kind), int64(c.DType), int64(c.Op), int64(c.N), int64(c.Root)
	if len(c.Counts) == size {
		for i, n := range c.Counts {
			v[callFixed+i] = int64(n)
		}
	}
	if len(c.RecvCounts) == size {
		for i, n := range c.RecvCounts {
			v[callFixed+size+i] = int64(n)
		}
	}
	return v
}

// CallOf reads a Call back from its Vector in a group of size ranks.
func CallOf(v []int64, size int) Call {
	c := Call{Kind: Kind(v[0]), DType: tensor.DType(v[1]), Op: tensor.ReduceOp(v[2]), N: int(v[3]), Root: int(v[4]),
		Counts: make([]int, size), RecvCounts: make([]int, size)}
	for i := range size {
		c.Counts[i] = int(v[callFixed+i])
		c.RecvCounts[i] = int(v[callFixed+size+i])
	}
	return c
}
