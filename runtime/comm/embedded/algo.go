package embedded

import "fmt"

// Algorithm names the algorithm a collective runs, as the knobs that force
// one spell it (GOHOROVOD_EMBEDDED_ALLGATHER, GOHOROVOD_EMBEDDED_ALLREDUCE).
type Algorithm string

// The algorithms. Auto, the default, chooses by size (see doc.go); the
// others force one whatever the size, as Open MPI's coll_tuned and
// NCCL_ALGO do, for measurements and as a way around a bad choice.
const (
	// Auto chooses by size.
	Auto Algorithm = "auto"
	// Direct: every rank sends its block straight to every other
	// (Allgatherv only).
	Direct Algorithm = "direct"
	// Bruck: Bruck's allgather, ceil(log2 n) rounds (Allgatherv only).
	Bruck Algorithm = "bruck"
	// Doubling: recursive doubling, log2 n exchanges of the whole buffer
	// (Allreduce only).
	Doubling Algorithm = "doubling"
	// Ring: the pipelined ring (Allgatherv and Allreduce).
	Ring Algorithm = "ring"
)

// Algorithms forces the algorithm of some collectives; an empty field is
// Auto. Every rank of a group must hold the same (ranks that differ would
// wait for frames that never come).
type Algorithms struct {
	// Allgather is Auto, Direct, Bruck or Ring.
	Allgather Algorithm
	// Allreduce is Auto, Doubling or Ring. Ring needs at least one element
	// per rank; an allreduce of fewer runs recursive doubling.
	Allreduce Algorithm
}

// Validate reports a field that names no algorithm of its collective.
func (a Algorithms) Validate() error {
	if err := checkAlgo("allgather", a.Allgather, Direct, Bruck, Ring); err != nil {
		return err
	}
	return checkAlgo("allreduce", a.Allreduce, Doubling, Ring)
}

// checkAlgo reports an algorithm a that is neither Auto (or empty) nor one
// of ok.
func checkAlgo(what string, a Algorithm, ok ...Algorithm) error {
	if a == "" || a == Auto {
		return nil
	}
	for _, o := range ok {
		if a == o {
			return nil
		}
	}
	return fmt.Errorf("embedded: %s algorithm %q: want auto or one of %q", what, string(a), ok)
}

// SetAlgorithms forces the algorithms of this group's collectives (and of
// the groups split from it afterwards). Like SetCheck it is called by every
// rank alike, between collectives; an invalid choice changes nothing and
// is returned.
func (c *Comm) SetAlgorithms(a Algorithms) error {
	if err := a.Validate(); err != nil {
		return err
	}
	c.algo = a
	return nil
}

// Algorithms returns the algorithms SetAlgorithms forced.
func (c *Comm) Algorithms() Algorithms { return c.algo }

// peerHook, when not nil (in tests), is called with the group rank of
// every peer a collective sends a frame to or posts a receive from.
var peerHook func(c *Comm, r int)
