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
// rank r's), or "" when they agree. Every rank that runs it on the same
// calls gets the same answer.
func Disagreement(k Kind, n int, call func(r int) Call) string {
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
