// Package agree holds the rules by which the ranks of one collective call
// must agree on their arguments, the per-rank checks of those arguments,
// and the error that reports a disagreement, once for every transport, so
// that a mistake reads the same on all of them. Each rank checks its own
// arguments with Args.Check; the in-memory group and the embedded
// transport then compare every rank's Call with Disagreement, and the MPI
// binding, which agrees through one small allreduce of the fields that
// must be equal, gathers every rank's Call (Vector, CallOf) when they are
// not and tells the disagreement with Disagreement too. They all use the
// same Kind names and the same MismatchError (comm.MismatchError and
// mpi.MismatchError are this type).
package agree
