// Package comm is the transports' contract: Communicator, the small
// interface through which the runtime moves tensor buffers between ranks,
// and its errors. It does not import MPI. The transports live beside it:
//
//	mpicomm   MPI, through the mpi binding (built with the "mpi" tag)
//	embedded  pure Go over TCP and Unix sockets, with the job's secret
//	memcomm   N ranks as goroutines of one process (NewGroup), for tests
//	commtest  one conformance suite that every transport must pass
//	fault     a wrapper that makes chosen calls fail, block or panic
//
// Exchange is the point-to-point exchange of the contract (each rank sends
// to one peer and receives from one, such as a pairwise swap or a shift
// along a ring): a transport may carry it natively (Exchanger); on every
// other Communicator it is one sparse Alltoallv, with the same agreement
// checks.
//
// When a rank fails, the others should learn which rank and why: a
// communicator that can tear its group down with a cause implements Aborter,
// and the other ranks then get a *PeerError (the in-memory and embedded
// transports do; an MPI abort ends the whole job instead). The package
// fault wraps any Communicator to make chosen calls fail, block or panic,
// for tests.
package comm
