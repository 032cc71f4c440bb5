// Package cycle is the decision of one background-loop cycle as a pure,
// clock-free state machine, in the manner of etcd's raft (Step in, Ready
// out): the loop pops this rank's requests, calls Begin for the agreement
// vector, combines it with the other ranks' (a bitwise AND, the only I/O of
// the fast path), calls Agreed (and, when asked, combines the invalid bits
// with an OR), then Decide, which says which cached responses every rank
// performs, which requests go back to the queue and whether to negotiate;
// negotiation's responses are added with Negotiated.
//
// Negotiation, the slow path, is a machine of its own: Begin, then a
// Step at a time, each a collective with its buffers (gather the request
// sizes, gather the requests to rank 0, broadcast the responses' size, then
// the responses) that the driver performs over its communicator before
// calling Done, which decodes, runs rank 0's coordinator and picks the next
// step. Gather is the same for the control exchanges outside a cycle
// (every rank's bytes on every rank).
//
// Control holds what the loop decides from cycle to cycle beside the
// agreement: the stop rule, the failure protocol (tell the other ranks in
// one more cycle, abort the transport, or leave a group a peer tore
// down), the farewell record and which rank's cause every rank reports,
// and the tick policy (when the next cycle starts, whether to sleep).
//
// No goroutines, no sleeps, no transport: a whole multi-rank cycle, with
// joins, cache hits, invalidations, negotiation and shutdowns, is scripted
// in one goroutine by the tests, which stand in for the transport by
// carrying out the steps' collectives on the ranks' buffers.
package cycle
