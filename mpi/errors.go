package mpi

import (
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/internal/agree"
)

// ErrNotBuiltIn is returned (wrapped) by every call of a binary built
// without the "mpi" build tag.
var ErrNotBuiltIn = errors.New("mpi: MPI support is not built in: rebuild with `go build -tags mpi` " +
	"with cgo enabled (after `make deps` installs Open MPI; add the mpich tag to link MPICH)")

// ErrSrunPMI is returned (wrapped, by CheckSrun and Init) when srun started
// the process without a PMI through which the linked MPI can start.
var ErrSrunPMI = errors.New("mpi: no PMI for this MPI in the srun step")

// ErrNotInitialized is returned by calls made before Init or after Finalize.
var ErrNotInitialized = errors.New("mpi: MPI is not initialised (call mpi.Init first)")

// ErrFinalized is returned by Init after Finalize: MPI cannot start twice in
// one process.
var ErrFinalized = errors.New("mpi: MPI has been finalised and cannot be initialised again")

// ErrFreed is returned by operations on a communicator after Free.
var ErrFreed = errors.New("mpi: communicator has been freed")

// Error is a failed MPI call: the function, its return code, the code's
// error class and the text MPI_Error_string gives for it.
type Error struct {
	Call  string // e.g. "MPI_Allreduce"
	Code  int    // the return code
	Class int    // MPI_Error_class of Code
	Text  string // MPI_Error_string of Code
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("mpi: %s failed: %s (code %d, class %d)", e.Call, e.Text, e.Code, e.Class)
}

// MismatchError reports arguments that disagree across the ranks of one
// collective call, as every rank sees it after the agreement check
// (Source "mpi"). It is the one type of the project for that error:
// comm.MismatchError is the same type.
type MismatchError = agree.MismatchError

// ArgError reports an argument that one rank found invalid on its own (a
// buffer too small for the counts, a root out of range, ...). With the
// agreement check on, every rank of the collective returns the same ArgError
// (that of the lowest rank that found a problem), and no data moves.
type ArgError struct {
	Op   string // the collective
	Rank int    // the rank that found the problem
	Msg  string // what it found
}

// Error implements the error interface.
func (e *ArgError) Error() string {
	return fmt.Sprintf("mpi: %s: rank %d: %s", e.Op, e.Rank, e.Msg)
}

// notBuilt wraps ErrNotBuiltIn with the name of the call.
func notBuilt(call string) error {
	return fmt.Errorf("%s: %w", call, ErrNotBuiltIn)
}
