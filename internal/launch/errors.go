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
	// Signal is the number of the signal that killed the rank, or 0.
	Signal int
	// Host is the node the rank ran on, or "" where the MPI launcher did
	// not say.
	Host string
	// PID is the rank's process id, or 0 where the MPI launcher did not say
	// (Open MPI 4.1 reports PID 0 for a signalled rank).
	PID int
	// LastWords is the failing rank's most telling line of its own
	// standard error (a Go panic's first line, else its last line that
	// reads like an error, else its last line), or "".
	LastWords string
}

// Error implements the error interface, e.g. "rank 2 (on host vm) was
// killed by signal 9 (SIGKILL); the other workers were stopped".
func (e *WorkerError) Error() string {
	who := "a worker"
	if e.Rank >= 0 {
		who = fmt.Sprintf("rank %d", e.Rank)
	}
	switch {
	case e.PID > 0 && e.Host != "":
		who += fmt.Sprintf(" (pid %d on host %s)", e.PID, e.Host)
	case e.PID > 0:
		who += fmt.Sprintf(" (pid %d)", e.PID)
	case e.Host != "":
		who += fmt.Sprintf(" (on host %s)", e.Host)
	}
	var msg string
	if e.Signal > 0 {
		msg = fmt.Sprintf("%s was killed by signal %d (%s); the other workers were stopped", who, e.Signal, SignalName(e.Signal))
	} else {
		msg = fmt.Sprintf("%s exited with status %d; the other workers were stopped", who, e.Code)
	}
	if e.LastWords != "" {
		msg += fmt.Sprintf(". Its last error output: %s", e.LastWords)
	}
	return msg
}

// linuxSignals are the names of the standard Linux signals, by number
// (x86, arm and most other Linux ports). Ranks run on Linux hosts even
// when the launcher does not, so the names do not come from syscall.
var linuxSignals = [...]string{1: "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS",
	"SIGFPE", "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT",
	"SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ",
	"SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR", "SIGSYS"}

// SignalName names Linux signal n: "SIGKILL" for 9, "SIGRTMIN+2" for 36,
// "signal 99" for a number no signal has.
func SignalName(n int) string {
	switch {
	case n > 0 && n < len(linuxSignals):
		return linuxSignals[n]
	case n >= 34 && n <= 64:
		return fmt.Sprintf("SIGRTMIN+%d", n-34)
	}
	return fmt.Sprintf("signal %d", n)
}

// ExitCode is the status the launcher exits with for this failure: the
// rank's own status when it is in 1..255, else 1.
func (e *WorkerError) ExitCode() int {
	if e.Code > 0 && e.Code < 256 {
		return e.Code
	}
	return 1
}
