// Package cache is the response cache and the bit-vector agreement built on
// it (Horovod's ResponseCache and CacheCoordinator).
//
// Every rank keeps an identical Cache of the responses of past operations,
// keyed by tensor name and numbered by a dense bit. When a rank submits a
// request that matches a cached response, it only sets that bit; ranks AND
// their bit vectors together and perform the operations whose bit is set
// everywhere, skipping the gather and broadcast of a full negotiation. The
// Cache changes only through calls that every rank makes with the same
// arguments in the same order (Put, Get, Erase), so the copies never drift.
//
// The package is pure: no I/O, no clock, no goroutines. The runtime's loop
// performs the allreduces of the vectors that Sync builds.
package cache
