package runtime

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/gohorovod/gohorovod/runtime/comm"
)

// The texts of Horovod's common errors (horovod/common/common.h).
const (
	notInitializedText = "Horovod has not been initialized; use hvd.Init()."
	shutDownText       = "Horovod has been shut down. This was caused by an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution. If the shutdown was caused by an exception, you should see the exception in the log before the first shutdown message."
	duplicateNameText  = "Requested to allreduce, allgather, or broadcast a tensor with the same name as another tensor that is currently being processed.  If you want to request another tensor, use a different tensor name."
	adasumPow2Text     = "Running Adasum with non-power of 2 ranks is not supported yet."
	reducescatterText  = "Reducescatter currently only supports AVERAGE and SUM."
)

var (
	// ErrNotInitialized is returned by calls made before Init. Calls on
	// the default Runtime (the package-level functions) while other
	// Runtimes are running return an error that wraps it and says to call
	// the methods of the *Runtime that RunLocal or StartLocal gave.
	ErrNotInitialized = errors.New("hvd: " + notInitializedText)
	// ErrShutdown is returned by calls made after Shutdown, and delivered to
	// pending handles when any rank shuts down, the communicator fails or a
	// stall shuts the job down. Errors that carry a cause wrap it too.
	ErrShutdown = errors.New("hvd: " + shutDownText)
	// ErrDuplicateName is returned at enqueue time when a name is already
	// in flight on this rank.
	ErrDuplicateName = errors.New("hvd: " + duplicateNameText)
	// ErrGroupClosed is returned by AllreduceGroup.Start on a group that
	// was closed, or whose runtime was shut down (and perhaps initialised
	// again) since the group was made.
	ErrGroupClosed = errors.New("hvd: allreduce group closed, or made before the runtime was last initialised")
	// ErrAlreadyInitialized is returned by a second Init of a running
	// Runtime.
	ErrAlreadyInitialized = errors.New("hvd: already initialized")
	// ErrInvalidArgument is wrapped by errors for arguments that one rank
	// can check alone (unsupported op, bad splits, bad root).
	ErrInvalidArgument = errors.New("hvd: invalid argument")
)

// OpError is a negotiation error: the ranks disagree about an operation.
// Every rank's handle for the tensor gets the same OpError; the runtime
// keeps working.
type OpError struct {
	Name    string // the tensor name
	Message string // Horovod's text, naming the field and the values
}

// Error implements the error interface.
func (e *OpError) Error() string { return fmt.Sprintf("hvd: %s: %s", e.Name, e.Message) }

// running counts the Runtimes that are initialised and not shut down. A
// call on the default Runtime before its Init while some are running is
// most likely package-level code under RunLocal or StartLocal, whose
// Runtimes are not the default: notInitialized says so.
var running atomic.Int64

// notInitialized returns the error for a call on r before Init.
func (r *Runtime) notInitialized() error {
	if n := running.Load(); n > 0 && r == Default() {
		return &notInitializedError{running: n}
	}
	return ErrNotInitialized
}

// notInitializedError is ErrNotInitialized for the default Runtime while
// others run.
type notInitializedError struct{ running int64 }

func (e *notInitializedError) Error() string {
	them := "another Runtime is"
	if e.running > 1 {
		them = fmt.Sprintf("%d other Runtimes are", e.running)
	}
	return "hvd: Horovod has not been initialized: the package-level functions (hvd.Allreduce, hvd.Barrier, ...) " +
		"use the default Runtime, which hvd.Init() has not started, while " + them + " running. " +
		"Code that runs under RunLocal or StartLocal must call the methods of the *Runtime it was given " +
		"(r.Allreduce, r.Rank, ...) instead; a single process calls hvd.Init() first."
}

func (e *notInitializedError) Unwrap() error { return ErrNotInitialized }

// shutdownError is ErrShutdown with the cause that led to it.
type shutdownError struct{ cause error }

func (e *shutdownError) Error() string {
	if e.cause == nil {
		return ErrShutdown.Error()
	}
	return ErrShutdown.Error() + " Cause: " + e.cause.Error()
}

func (e *shutdownError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrShutdown}
	}
	return []error{ErrShutdown, e.cause}
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// RankError is the root cause reported on every rank when another rank
// stopped the job: its runtime failed (Message is its error, as that rank
// reported it), its stall inspector shut the job down (Stall), it called
// Shutdown (Shutdown; not a failure), or it froze (Frozen: it sent no
// heartbeat for HOROVOD_HEARTBEAT_TIMEOUT_SECONDS; Host is its host), and
// its node went silent too (Unreachable: not even its kernel answered).
// Pending and later calls return an error that wraps it (errors.As).
type RankError struct {
	Rank     int    // the rank that failed or stopped the job
	Host     string // its host, where known
	Message  string // its error's text (empty for Shutdown)
	Stall    bool   // rank 0's stall inspector shut the job down
	Shutdown bool   // the rank called Shutdown
	Frozen   bool   // the rank stopped making progress while alive
	// Unreachable (with Frozen): nothing came from the rank's node at all,
	// not even TCP acknowledgements: the node or its network went silent.
	Unreachable bool
}

// Error names the rank and its cause.
func (e *RankError) Error() string {
	switch {
	case e.Shutdown:
		return fmt.Sprintf("hvd: rank %d called Shutdown", e.Rank)
	case e.Frozen && e.Unreachable && e.Host != "":
		return fmt.Sprintf("hvd: rank %d: its node (host %s) went silent: %s", e.Rank, e.Host, e.Message)
	case e.Frozen && e.Unreachable:
		return fmt.Sprintf("hvd: rank %d: its node went silent: %s", e.Rank, e.Message)
	case e.Frozen && e.Host != "":
		return fmt.Sprintf("hvd: rank %d (host %s) froze: %s", e.Rank, e.Host, e.Message)
	case e.Frozen:
		return fmt.Sprintf("hvd: rank %d froze: %s", e.Rank, e.Message)
	}
	return fmt.Sprintf("hvd: rank %d failed: %s", e.Rank, e.Message)
}

// PanicError is the root cause when the background loop panicked: the
// panic's value and the loop's stack (also written to the log). Every
// pending and later call on the rank returns an error that wraps it.
type PanicError struct {
	Value any
	Stack []byte
}

// Error names the panic's value.
func (e *PanicError) Error() string { return fmt.Sprintf("hvd: background loop panicked: %v", e.Value) }

// StallError is the root cause when the stall inspector shut the job down
// (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS): Message is its report, naming the
// tensors and the ranks that did not submit them.
type StallError struct{ Message string }

// Error returns the stall report.
func (e *StallError) Error() string { return "hvd: stall inspector: " + e.Message }

// FailedRank reports which rank's failure err comes from, when the runtime
// or the transport could tell (a *RankError, or a transport's
// *comm.PeerError), and its cause's text.
func FailedRank(err error) (rank int, cause string, ok bool) {
	var re *RankError
	if errors.As(err, &re) && !re.Shutdown {
		return re.Rank, re.Message, true
	}
	var pe *comm.PeerError
	if errors.As(err, &pe) {
		return pe.Rank, pe.Cause, true
	}
	return -1, "", false
}
