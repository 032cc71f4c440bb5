package runtime

import (
	"errors"

	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/runtime/comm"
)

// mpiNotEnabledText is Horovod's error when MPI queries are made without MPI.
const mpiNotEnabledText = "Horovod MPI is not enabled; Please make sure it's installed and enabled."

func openMPI() (comm.Communicator, error) { return comm.NewMPI() }

// MPIBuilt reports whether this binary was built with MPI support (the "mpi"
// build tag).
func MPIBuilt() bool { return mpi.Built }

// MPIEnabled reports whether this runtime runs over MPI (Init opened the MPI
// communicator rather than being given one).
func (r *Runtime) MPIEnabled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st != stateNew && r.ownsComm
}

// MPIThreadsSupported reports whether MPI was initialised with
// MPI_THREAD_MULTIPLE, which gohorovod always requests and requires; it is an
// error when the runtime does not run over MPI.
func (r *Runtime) MPIThreadsSupported() (bool, error) {
	if err := r.checkRunning(); err != nil && errors.Is(err, ErrNotInitialized) {
		return false, err
	}
	if !r.MPIEnabled() {
		return false, errors.New("hvd: " + mpiNotEnabledText)
	}
	return mpi.Initialized(), nil
}
