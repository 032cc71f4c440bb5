package runtime

import (
	"errors"

	"github.com/gohorovod/gohorovod/runtime/internal/transport"
)

// mpiNotEnabledText is Horovod's error when MPI queries are made without MPI.
const mpiNotEnabledText = "Horovod MPI is not enabled; Please make sure it's installed and enabled."

// MPIBuilt reports whether this binary was built with MPI support (the "mpi"
// build tag).
func MPIBuilt() bool { return transport.Built() }

// MPIEnabled reports whether this runtime runs over MPI: Init opened MPI's
// world, because it was given no communicator and an MPI launcher started
// the process (or the program initialised MPI itself). It is false before
// Init, for a runtime given its communicator (WithCommunicator, RunLocal),
// and for a process started without a launcher, which runs as one rank in
// memory (see Init).
func (r *Runtime) MPIEnabled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st != stateNew && r.place.MPI()
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
	return transport.MPIInitialized(), nil
}
