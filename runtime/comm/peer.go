package comm

import "fmt"

// PeerError reports that another rank of the group failed: Rank is that
// rank, Cause the text of its error as far as the transport could carry it
// (empty when unknown). It matches ErrClosed (errors.Is), because the group
// is torn down.
type PeerError struct {
	Rank  int    // the rank that failed
	Cause string // the text of its error; empty when unknown
}

// Error names the failed rank and, when known, its cause.
func (e *PeerError) Error() string {
	if e.Cause == "" {
		return fmt.Sprintf("comm: rank %d failed", e.Rank)
	}
	return fmt.Sprintf("comm: rank %d failed: %s", e.Rank, e.Cause)
}

// Is reports whether target is ErrClosed.
func (e *PeerError) Is(target error) bool { return target == ErrClosed }

// Aborter is implemented by communicators that can tear the whole group down
// with a cause that the other ranks receive. After Abort(cause) on one rank,
// every other rank's blocked and later calls return an error that matches
// ErrClosed and wraps a *PeerError naming the aborting rank and the text of
// cause; the aborting rank's own later calls return an error that matches
// ErrClosed and cause (an *AbortedError). Like Close, Abort may be called from any goroutine,
// and only the first Close or Abort of a group decides what its ranks see.
type Aborter interface {
	Abort(cause error) error
}

// AbortedError is what the aborting rank itself gets from its later calls
// after Abort: the group is closed (it matches ErrClosed), and Cause, the
// error given to Abort, is why.
type AbortedError struct {
	Rank  int   // this rank, which aborted the group
	Cause error // what Abort was given; nil when none
}

// Error names this rank and, when known, its cause.
func (e *AbortedError) Error() string {
	if e.Cause == nil {
		return fmt.Sprintf("comm: rank %d (this rank) aborted the group", e.Rank)
	}
	return fmt.Sprintf("comm: rank %d (this rank) aborted the group: %v", e.Rank, e.Cause)
}

// Is reports whether target is ErrClosed.
func (e *AbortedError) Is(target error) bool { return target == ErrClosed }

// Unwrap returns the cause given to Abort.
func (e *AbortedError) Unwrap() error { return e.Cause }
