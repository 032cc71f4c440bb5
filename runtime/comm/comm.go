package comm

import (
	"errors"
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/internal/agree"
	"github.com/gohorovod/gohorovod/tensor"
)

// Communicator moves tensor buffers among a fixed group of ranks. Every
// method except Rank and Size is collective: all ranks of the group call it,
// in the same order, with arguments that agree (the same element count for
// Allreduce and Bcast, the same counts slices for the v-collectives, the same
// root). Arguments that disagree across ranks are reported as an error on
// every rank (a *MismatchError, where the implementation can detect it)
// and never corrupt memory; the communicator stays usable afterwards. A call
// rejected for its arguments, on any rank, moves no data: every buffer is
// left as it was.
//
// Counts are in elements of the tensors' dtype, and blocks lie contiguously
// in rank order: block r of a v-collective starts at the sum of counts[:r].
//
// A Communicator is used by one goroutine at a time (the runtime's background
// loop owns it); implementations need not be safe for concurrent calls.
type Communicator interface {
	// Rank is this process's index in the group, in [0, Size()).
	Rank() int
	// Size is the number of ranks in the group.
	Size() int

	// Allreduce combines buf elementwise across ranks with op, in place.
	Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error
	// Allgatherv concatenates, in rank order, counts[r] elements from each
	// rank r into recv on every rank. send holds counts[Rank()] elements and
	// recv at least the sum of counts.
	Allgatherv(send, recv *tensor.Tensor, counts []int) error
	// Gatherv is Allgatherv with the result on root only; recv is ignored on
	// other ranks (it may be nil there).
	Gatherv(send, recv *tensor.Tensor, counts []int, root int) error
	// Bcast copies buf from root to every rank.
	Bcast(buf *tensor.Tensor, root int) error
	// Alltoallv sends sendCounts[r] elements of send (block r) to rank r, and
	// receives recvCounts[r] elements from rank r into block r of recv. send
	// holds the sum of sendCounts elements and recv at least the sum of
	// recvCounts; recvCounts[s] on rank r must equal sendCounts[r] on rank s.
	Alltoallv(send *tensor.Tensor, sendCounts []int, recv *tensor.Tensor, recvCounts []int) error
	// ReduceScatter combines send (the sum of counts elements) across ranks
	// with op and leaves block Rank() of the result, counts[Rank()] elements,
	// in recv (which holds at least that many).
	ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error
	// Barrier returns once every rank has entered it.
	Barrier() error

	// Split partitions the group by color; ranks with the same color form a
	// new group, ordered by key and then by rank. A rank that passes a
	// negative color takes part but joins no group: it gets an error, and
	// the other ranks still get their groups.
	Split(color, key int) (Communicator, error)
	// SplitLocal returns the group of ranks that share this rank's node
	// (memory), ordered by rank.
	SplitLocal() (Communicator, error)

	// Close releases the communicator; calling it again returns nil. Calls
	// after Close return ErrClosed.
	Close() error
}

// ErrClosed is returned by operations on a closed communicator, or on one
// whose group has been torn down by another rank.
var ErrClosed = errors.New("comm: communicator is closed")

// MismatchError reports arguments that disagree across the ranks of one
// collective call (Source "comm"). It is the one type of the project for
// that error: mpi.MismatchError is the same type, with Source "mpi".
type MismatchError = agree.MismatchError

// Sum returns the sum of counts; the total element count of a v-collective.
func Sum(counts []int) int { return agree.Sum(counts) }

// Offsets returns the starting element of each block for the given counts.
func Offsets(counts []int) []int {
	off := make([]int, len(counts))
	n := 0
	for i, c := range counts {
		off[i] = n
		n += c
	}
	return off
}

// CheckLocal validates the arguments of a v-collective that one rank can
// check alone: counts has one non-negative entry per rank, the send buffer
// holds the expected number of elements and recv is large enough. It is
// the transports' own per-rank check (internal/agree's CheckVector), for
// code above them that runs a v-collective of its own, such as the
// hierarchical one.
func CheckLocal(op string, size int, counts []int, send *tensor.Tensor, sendWant int, recv *tensor.Tensor, recvWant int) error {
	if err := agree.CheckVector(size, counts, send, sendWant, recv, recvWant); err != nil {
		return fmt.Errorf("comm: %s: %w", op, err)
	}
	return nil
}

// PatientAllreducer is implemented by communicators that can wait for the
// other ranks of an Allreduce without spinning (the MPI adapter, mpicomm:
// a nonblocking allreduce, tested, with sleeps of up to maxSleep between
// the tests). The runtime's loop uses it for the per-cycle agreement,
// where a rank waits for peers that are still computing. Communicators
// whose waits block already (the embedded transport's sockets) need not.
type PatientAllreducer interface {
	AllreducePatient(buf *tensor.Tensor, op tensor.ReduceOp, maxSleep time.Duration) error
}

// Doorbeller is implemented by communicators whose patient waits can sleep
// on a doorbell shared by the ranks of a node until the last local rank
// joins the collective, instead of on a timer (the MPI adapter, mpicomm:
// mpi.Comm.EnableDoorbell). EnableDoorbell is collective: every rank calls
// it, before any patient collective; when one rank cannot set it up, every
// rank gets that rank's error and the waits keep their timers.
type Doorbeller interface {
	EnableDoorbell() error
}

// AgreementChecker is implemented by communicators whose collectives first
// check, with one extra small collective, that the ranks' arguments agree
// (the MPI adapter, mpicomm; the check is on by default). The runtime turns the check
// off on paths where negotiation already guarantees agreement, such as the
// per-cycle bit-vector allreduce. Every rank must make the same choice.
type AgreementChecker interface {
	SetCheck(on bool)
	Check() bool
}
