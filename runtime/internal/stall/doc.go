// Package stall is the stall inspector: it notices tensors that some ranks
// have submitted and others have not for longer than a warning time, names
// the tensors and the missing ranks in Horovod's words, and decides when a
// stall has lasted long enough to shut the job down.
//
// It is pure: the caller passes the current time and the coordinator's table
// of pending names, and acts on the Report it gets back (logs it, shuts
// down). After Horovod's text, the report says per missing rank what it did
// submit instead (the names likely differ across ranks) or that it
// submitted nothing for the whole stall (it is busy elsewhere, or on a code
// path without the collective), from the pending names and each rank's last
// submission time, which the caller passes.
//
// It also tracks this rank's cached requests that wait for other ranks, so
// that the runtime can move long-waiting ones out of the cache's fast path
// and make them visible to the coordinator.
package stall
