package launch

import (
	"errors"
	"fmt"
)

// UsageError is bad input caught before anything starts: a malformed flag
// value, an impossible placement, a missing program. The command exits
// with status 2 for it.
type UsageError struct{ Msg string }

// Error implements the error interface.
func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, a ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, a...)}
}

// IsUsage reports whether err is (or wraps) a *UsageError.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// WorkerError reports a job that ended because a worker failed.
type WorkerError struct {
	// Rank is the first failing rank, or -1 where the MPI launcher did not
	// say which.
	Rank int
	// Code is that rank's exit status, or the launcher's own.
	Code int
	// Signal names the signal that killed the rank, if one did.
	Signal string
}

// Error implements the error interface.
func (e *WorkerError) Error() string {
	who := "a worker"
	if e.Rank >= 0 {
		who = fmt.Sprintf("rank %d", e.Rank)
	}
	if e.Signal != "" {
		return fmt.Sprintf("%s was killed by signal %s; the other workers were stopped", who, e.Signal)
	}
	return fmt.Sprintf("%s exited with status %d; the other workers were stopped", who, e.Code)
}

// ExitCode is the status the launcher exits with for this failure: the
// rank's own status when it is in 1..255, else 1.
func (e *WorkerError) ExitCode() int {
	if e.Code > 0 && e.Code < 256 {
		return e.Code
	}
	return 1
}
