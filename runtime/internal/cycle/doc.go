// Package cycle is the decision of one background-loop cycle as a pure,
// clock-free state machine, in the manner of etcd's raft (Step in, Ready
// out): the loop pops this rank's requests, calls Begin for the agreement
// vector, combines it with the other ranks' (a bitwise AND, the only I/O of
// the fast path), calls Agreed (and, when asked, combines the invalid bits
// with an OR), then Decide, which says which cached responses every rank
// performs, which requests go back to the queue and whether to negotiate;
// negotiation's responses are added with Negotiated. No goroutines, no
// sleeps, no transport: a whole multi-rank cycle, with joins, cache hits,
// invalidations and shutdowns, is scripted in one goroutine by the tests.
package cycle
