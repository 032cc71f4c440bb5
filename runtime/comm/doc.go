// Package comm defines Communicator, the small interface through which the
// runtime moves tensor buffers between ranks, and provides two
// implementations of it: an in-memory group that runs N ranks as goroutines
// in one process (NewGroup), and an adapter over the MPI binding (NewMPI,
// which reports that MPI is not built in unless the binary was built with the
// "mpi" tag).
//
// The interface is about buffers, not about MPI: a later pure-Go TCP or
// shared-memory transport, or a GPU transport over NCCL, implements the same
// methods. The package commtest holds one conformance suite that every
// implementation must pass.
//
// When a rank fails, the others should learn which rank and why: a
// communicator that can tear its group down with a cause implements Aborter,
// and the other ranks then get a *PeerError (the in-memory group does; an MPI
// abort ends the whole job instead). The package fault wraps any
// Communicator to make chosen calls fail, block or panic, for tests.
package comm
