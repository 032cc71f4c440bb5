//go:build !mpi || !cgo

package mpi

import (
	"os"

	"github.com/gohorovod/gohorovod/tensor"
)

// Built reports whether MPI support is compiled into this binary.
const Built = false

// Library names the MPI implementation this binary links (none).
const Library = "no MPI"

// Init reports that MPI support is not built in. Started by an MPI launcher
// with more than one rank, it says so, naming the launcher's variable.
func Init() error {
	if err := CheckLaunch(DetectLaunch(os.Getenv), false, Library, 0); err != nil {
		return err
	}
	return notBuilt("mpi.Init")
}

// Initialized reports whether MPI is running: never, without MPI support.
func Initialized() bool { return false }

// Settings returns nothing: without MPI, Init sets no parameter.
func Settings() []Setting { return nil }

// Finalize does nothing without MPI support.
func Finalize() error { return nil }

// Time returns 0 without MPI support.
func Time() float64 { return 0 }

// LibraryVersion returns an empty string without MPI support.
func LibraryVersion() string { return "" }

// Comm is an MPI communicator; without MPI support none can be obtained.
type Comm struct{}

// World reports that MPI support is not built in.
func World() (*Comm, error) { return nil, notBuilt("mpi.World") }

// Rank returns 0.
func (c *Comm) Rank() int { return 0 }

// Size returns 1.
func (c *Comm) Size() int { return 1 }

// SetCheck does nothing without MPI support.
func (c *Comm) SetCheck(on bool) {}

// Check reports true.
func (c *Comm) Check() bool { return true }

// AllreducePatient reports that MPI support is not built in.
func (c *Comm) AllreducePatient(buf *tensor.Tensor, op tensor.ReduceOp, p Patience) error {
	return notBuilt("mpi.AllreducePatient")
}

// Allreduce reports that MPI support is not built in.
func (c *Comm) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	return notBuilt("mpi.Allreduce")
}

// Bcast reports that MPI support is not built in.
func (c *Comm) Bcast(buf *tensor.Tensor, root int) error { return notBuilt("mpi.Bcast") }

// Allgatherv reports that MPI support is not built in.
func (c *Comm) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	return notBuilt("mpi.Allgatherv")
}

// Gatherv reports that MPI support is not built in.
func (c *Comm) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	return notBuilt("mpi.Gatherv")
}

// Alltoallv reports that MPI support is not built in.
func (c *Comm) Alltoallv(send *tensor.Tensor, sendCounts []int, recv *tensor.Tensor, recvCounts []int) error {
	return notBuilt("mpi.Alltoallv")
}

// Sendrecv reports that MPI support is not built in.
func (c *Comm) Sendrecv(send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error {
	return notBuilt("mpi.Sendrecv")
}

// ReduceScatter reports that MPI support is not built in.
func (c *Comm) ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error {
	return notBuilt("mpi.ReduceScatter")
}

// Barrier reports that MPI support is not built in.
func (c *Comm) Barrier() error { return notBuilt("mpi.Barrier") }

// Split reports that MPI support is not built in.
func (c *Comm) Split(color, key int) (*Comm, error) { return nil, notBuilt("mpi.Split") }

// SplitShared reports that MPI support is not built in.
func (c *Comm) SplitShared() (*Comm, error) { return nil, notBuilt("mpi.SplitShared") }

// Dup reports that MPI support is not built in.
func (c *Comm) Dup() (*Comm, error) { return nil, notBuilt("mpi.Dup") }

// Free reports that MPI support is not built in.
func (c *Comm) Free() error { return notBuilt("mpi.Free") }

// EnableDoorbell reports that MPI support is not built in.
func (c *Comm) EnableDoorbell() error { return notBuilt("mpi.EnableDoorbell") }
