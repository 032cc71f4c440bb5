// Package stall is the stall inspector: it notices tensors that some ranks
// have submitted and others have not for longer than a warning time, names
// the tensors and the missing ranks in Horovod's words, and decides when a
// stall has lasted long enough to shut the job down.
//
// It is pure: the caller passes the current time and the coordinator's table
// of pending names, and acts on the Report it gets back (logs it, shuts
// down). It also tracks this rank's cached requests that wait for other
// ranks, so that the runtime can move long-waiting ones out of the cache's
// fast path and make them visible to the coordinator.
package stall
