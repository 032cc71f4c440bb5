// Package agree holds the rules by which the ranks of one collective call
// must agree on their arguments, and the error that reports a
// disagreement, once for every transport: the in-memory group and the
// embedded transport compare every rank's Call with Disagreement, and the
// MPI binding, which agrees through one small allreduce of the fields that
// Fields lists, uses the same Kind names and the same MismatchError
// (comm.MismatchError and mpi.MismatchError are this type).
package agree
