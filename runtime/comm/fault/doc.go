// Package fault injects transport failures into a comm.Communicator, so that
// tests can check what the runtime does when a collective fails, hangs or
// panics on one rank, and what the other ranks learn about it.
//
// Wrap puts rules around one rank's communicator: a rule picks the k-th call
// of a kind of collective (or every call) and makes it return an error,
// block until released or until the group is torn down, or panic; with
// Abort it also tears the group down through comm.Aborter, so that the other
// ranks' calls return a *comm.PeerError naming this rank, as the peers of a
// rank whose transport failed would see it. A faulting call moves no data
// and never enters the wrapped collective.
//
// Without Abort, a rank that fails a collective leaves its peers waiting in
// it, as a real lost rank would: give the in-memory group a
// memcomm.GroupOptions.Timeout, or fault the same call on every rank, or Abort.
package fault
