package mpicomm

import (
	"errors"
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// New initialises MPI if need be (mpi.Init: MPI_THREAD_MULTIPLE, errors
// returned rather than fatal) and returns this process's member of the world
// group, over a duplicate of MPI_COMM_WORLD so that the runtime's traffic
// never meets the application's. Every process of the job calls it. Without
// the "mpi" build tag it returns an error wrapping mpi.ErrNotBuiltIn, which
// says how to rebuild (and, under a multi-rank mpirun, that the binary must
// not run as separate single-rank jobs).
//
// Close the communicators it returns (and those split from them), then call
// Finalize once, before the process exits.
func New() (comm.Communicator, error) {
	if err := mpi.Init(); err != nil {
		return nil, err
	}
	w, err := mpi.World()
	if err != nil {
		return nil, err
	}
	d, err := w.Dup()
	if err != nil {
		return nil, err
	}
	return &mpiComm{c: d}, nil
}

// Finalize finalises MPI (mpi.Finalize). Every process calls it once, after
// closing its MPI communicators; it does nothing when MPI is not running.
func Finalize() error { return mpi.Finalize() }

// mpiComm adapts *mpi.Comm to Communicator.
type mpiComm struct {
	c      *mpi.Comm
	closed bool
}

var (
	_ comm.AgreementChecker  = (*mpiComm)(nil)
	_ comm.PatientAllreducer = (*mpiComm)(nil)
	_ comm.Doorbeller        = (*mpiComm)(nil)
	_ comm.Exchanger         = (*mpiComm)(nil)
)

// err translates the binding's errors into the contract's, with the words
// of the other transports: a *mpi.MismatchError becomes a
// *comm.MismatchError; a rank's own bad argument (*mpi.ArgError, which
// every rank gets) is that rank's own error there, "comm: <collective>:
// <what>", and a *comm.MismatchError naming it on the others; a freed
// communicator is comm.ErrClosed; the rest pass through (*mpi.Error).
func (m *mpiComm) err(err error) error {
	if err == nil {
		return nil
	}
	var me *mpi.MismatchError
	if errors.As(err, &me) {
		return &comm.MismatchError{Source: "comm", Op: me.Op, Detail: me.Detail}
	}
	var ae *mpi.ArgError
	if errors.As(err, &ae) {
		own := fmt.Sprintf("comm: %s: %s", ae.Op, ae.Msg)
		if ae.Rank == m.c.Rank() {
			return errors.New(own)
		}
		return &comm.MismatchError{Source: "comm", Op: ae.Op, Detail: fmt.Sprintf("rank %d: %s", ae.Rank, own)}
	}
	if errors.Is(err, mpi.ErrFreed) {
		return fmt.Errorf("%w (%w)", comm.ErrClosed, err)
	}
	return err
}

func (m *mpiComm) live() error {
	if m.closed {
		return comm.ErrClosed
	}
	return nil
}

// Rank returns this process's rank in the group.
func (m *mpiComm) Rank() int { return m.c.Rank() }

// Size returns the number of ranks in the group.
func (m *mpiComm) Size() int { return m.c.Size() }

// SetCheck turns the agreement check on or off (see AgreementChecker).
func (m *mpiComm) SetCheck(on bool) { m.c.SetCheck(on) }

// Check reports whether the agreement check is on.
func (m *mpiComm) Check() bool { return m.c.Check() }

// Allreduce reduces buf in place across the group (MPI_Allreduce, MPI_IN_PLACE).
func (m *mpiComm) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.Allreduce(buf, op))
}

// AllreducePatient is Allreduce waiting for the other ranks with
// MPI_Iallreduce and MPI_Test, sleeping up to maxSleep between the tests
// (mpi.DefaultPatience); maxSleep 0 is Allreduce (comm.PatientAllreducer).
func (m *mpiComm) AllreducePatient(buf *tensor.Tensor, op tensor.ReduceOp, maxSleep time.Duration) error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.AllreducePatient(buf, op, mpi.DefaultPatience(maxSleep)))
}

// EnableDoorbell lets the patient waits sleep on the node's doorbell
// (mpi.Comm.EnableDoorbell; comm.Doorbeller). Collective.
func (m *mpiComm) EnableDoorbell() error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.EnableDoorbell())
}

// Allgatherv gathers every rank's block on every rank (MPI_Allgatherv).
func (m *mpiComm) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.Allgatherv(send, recv, counts))
}

// Gatherv gathers every rank's block on root (MPI_Gatherv).
func (m *mpiComm) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.Gatherv(send, recv, counts, root))
}

// Bcast copies buf from root to every rank (MPI_Bcast).
func (m *mpiComm) Bcast(buf *tensor.Tensor, root int) error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.Bcast(buf, root))
}

// Alltoallv exchanges blocks between every pair of ranks (MPI_Alltoallv).
func (m *mpiComm) Alltoallv(send *tensor.Tensor, sendCounts []int, recv *tensor.Tensor, recvCounts []int) error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.Alltoallv(send, sendCounts, recv, recvCounts))
}

// Exchange sends send to dest and fills recv from source (comm.Exchange).
// With the agreement check on it is comm.Exchange's sparse MPI_Alltoallv,
// agreed like any collective; with the check off (as the runtime runs it,
// once it has agreed on the pairs itself) it is one MPI_Sendrecv between
// the pairs.
func (m *mpiComm) Exchange(send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error {
	if err := m.live(); err != nil {
		return err
	}
	if m.c.Check() {
		return comm.ExchangeAlltoallv(m, send, dest, recv, source)
	}
	if err := comm.CheckExchange(m.Size(), send, dest, recv, source); err != nil {
		return err
	}
	return m.err(m.c.Sendrecv(send, dest, recv, source))
}

// ReduceScatter reduces send and scatters its blocks (MPI_Reduce_scatter).
func (m *mpiComm) ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.ReduceScatter(send, recv, counts, op))
}

// Barrier waits for every rank (MPI_Barrier).
func (m *mpiComm) Barrier() error {
	if err := m.live(); err != nil {
		return err
	}
	return m.err(m.c.Barrier())
}

// Split partitions the group with MPI_Comm_split. A negative color is an
// error on the ranks that pass it (the others still get their groups).
func (m *mpiComm) Split(color, key int) (comm.Communicator, error) {
	if err := m.live(); err != nil {
		return nil, err
	}
	s, err := m.c.Split(color, key)
	if err != nil {
		return nil, m.err(err)
	}
	return &mpiComm{c: s}, nil
}

// SplitLocal returns the ranks that share this node's memory
// (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED), ordered by rank.
func (m *mpiComm) SplitLocal() (comm.Communicator, error) {
	if err := m.live(); err != nil {
		return nil, err
	}
	s, err := m.c.SplitShared()
	if err != nil {
		return nil, m.err(err)
	}
	return &mpiComm{c: s}, nil
}

// Close frees the MPI communicator (collective: every member closes it). It
// is idempotent; other calls after Close return comm.ErrClosed.
func (m *mpiComm) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	return m.err(m.c.Free())
}

// Settings returns the Open MPI parameters that MPI's initialisation set
// in this process's environment where the user had not (mpi.MPISettings),
// for the runtime's log.
func Settings() []mpi.Setting { return mpi.Settings() }
