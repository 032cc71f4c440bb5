// Package liveness finds a rank that is alive but makes no progress: a
// process stopped by a signal or a debugger, a frozen or swapped host, a
// wedged driver. Such a rank keeps its connections open, so no transport
// sees it die, and its peers would wait for it for ever.
//
// Every rank runs a small heartbeat goroutine beside the data path, on a
// channel of its own (a TCP star around rank 0, every connection proving
// the job's secret first), so that heartbeats never queue behind a large
// payload and user code that is merely slow (a long data loader, a
// checkpoint write, a first step that compiles) never stops them. Rank 0
// hears every rank; every rank hears rank 0. A rank that has sent nothing
// for the timeout is declared frozen: rank 0 tells every other rank which
// one, and each calls the runtime's handler, which ends the job (or, in an
// elastic job, has the group re-formed without it). A connection that
// closes is a rank that left (cleanly or by dying), which is the
// transports' business, not a freeze.
//
// Tracker is the pure part (who was heard when, who is silent); Star is
// the driver that does the I/O.
package liveness
