package elastic

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNoPreviousHosts ends a job whose new round would keep no host of the
// last one: no worker would hold the state to broadcast. The text is
// Horovod's.
var ErrNoPreviousHosts = errors.New("No hosts from previous set remaining, unable to broadcast state.")

// ResetLimitError ends a job that has reset --reset-limit times and would
// reset again.
type ResetLimitError struct{ Limit int }

// Error implements the error interface with Horovod's text.
func (e *ResetLimitError) Error() string {
	return fmt.Sprintf("Horovod was shutdown because number of resets during elastic job exceeded limit: %d", e.Limit)
}

// Failure is one worker that exited with a non-zero status.
type Failure struct {
	Slot   Slot
	Status int
}

// WorkersFailedError ends a job in which every worker of a round failed.
type WorkersFailedError struct{ Failures []Failure }

// Error implements the error interface.
func (e *WorkersFailedError) Error() string {
	parts := make([]string, len(e.Failures))
	for i, f := range e.Failures {
		parts[i] = fmt.Sprintf("%s exit status %d", f.Slot, f.Status)
	}
	return "elastic: every worker failed (" + strings.Join(parts, ", ") + "); Horovod detected that one or more processes exited with non-zero status"
}

// BlacklistedError ends a job whose hosts are all blacklisted after a
// round's failures.
type BlacklistedError struct{ Hosts []string }

// Error implements the error interface.
func (e *BlacklistedError) Error() string {
	return "elastic: every host of the job is blacklisted after its workers failed (" + strings.Join(e.Hosts, ", ") + "); no host is left to run on"
}

// TimeoutError ends a job that waited the elastic timeout for enough slots:
// -np slots to start, --min-np slots to go on after a reset.
type TimeoutError struct {
	// Waited is the elastic timeout.
	Waited time.Duration
	// Need is the number of slots waited for; Flag names the flag it came
	// from ("-np" or "--min-np").
	Need int
	Flag string
	// Have is the number of slots available (not blacklisted) at the end.
	Have int
	// Script names the host discovery script when it had not yet answered
	// (its first run still going); "" otherwise.
	Script string
}

// Error implements the error interface.
func (e *TimeoutError) Error() string {
	if e.Script != "" {
		return fmt.Sprintf("elastic: timed out after %s waiting for %d slots (%s %d): the host discovery script %s "+
			"timed out: it had not printed its hosts when the elastic timeout (--elastic-timeout) passed; "+
			"check that it ends, or give the job a longer --elastic-timeout",
			e.Waited, e.Need, e.Flag, e.Need, e.Script)
	}
	return fmt.Sprintf("elastic: timed out after %s waiting for %d slots (%s %d), %d available; "+
		"please check that you have enough resources to run at least %d Horovod processes",
		e.Waited, e.Need, e.Flag, e.Need, e.Have, e.Need)
}

// DiscoveryTimeoutError ends a job whose discovery script kept failing for
// the elastic timeout.
type DiscoveryTimeoutError struct {
	Waited time.Duration
	Last   *DiscoveryError
}

// Error implements the error interface.
func (e *DiscoveryTimeoutError) Error() string {
	return fmt.Sprintf("elastic: host discovery kept failing for %s: %v", e.Waited, e.Last)
}

// Unwrap returns the last discovery failure.
func (e *DiscoveryTimeoutError) Unwrap() error { return e.Last }
