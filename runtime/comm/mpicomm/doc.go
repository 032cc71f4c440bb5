// Package mpicomm is the MPI transport: it adapts the mpi package's
// communicators to comm.Communicator. It is the only package of the
// transports that imports mpi, so that code which only names the
// Communicator contract (the runtime's decisions, the other transports,
// the conformance suite) does not depend on MPI.
//
// Without the "mpi" build tag, New reports that MPI support is not built
// in (mpi.ErrNotBuiltIn), with the rebuild command.
package mpicomm
