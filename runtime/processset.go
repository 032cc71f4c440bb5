package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gohorovod/gohorovod/runtime/comm"
)

// ProcessSet is a subset of a job's ranks that run collectives among
// themselves, as Horovod's process sets: model-parallel groups, separate
// evaluation ranks, pipeline stages. Ranks are global ranks, kept sorted.
// Each set has its own queue, negotiation, response cache and join state,
// so that two disjoint sets may reduce tensors of the same names at the
// same time. Id 0 is the global set (every rank).
//
// A set comes to life in one of three ways, each on every process alike:
// given to Init (WithProcessSets: NewProcessSet or ProcessSetFromComm), or
// added later with Runtime.AddProcessSet when dynamic process sets are on
// (WithDynamicProcessSets or HOROVOD_DYNAMIC_PROCESS_SETS=1). A collective
// takes its set with the InProcessSet call option. Its methods are safe for
// concurrent use.
type ProcessSet struct {
	mu      sync.Mutex
	ranks   []int             // sorted global ranks; nil for a set from a communicator before Init
	from    comm.Communicator // ProcessSetFromComm's communicator (nil on non-members)
	isComm  bool              // made by ProcessSetFromComm
	id      int               // -1 until registered
	owner   *Runtime
	gen     uint64 // the owner's Init generation the set belongs to
	rank    int    // this process's rank in the set, or -1
	removed bool
}

// NewProcessSet returns an unregistered process set of the given global
// ranks (in any order; they are kept sorted), for WithProcessSets. Its ID is
// -1 until Init registers it.
func NewProcessSet(ranks ...int) *ProcessSet {
	rs := slices.Clone(ranks)
	slices.Sort(rs)
	return &ProcessSet{ranks: rs, id: -1, rank: -1}
}

// ProcessSetFromComm returns an unregistered process set whose members are
// the ranks of c, a communicator split from the one the runtime runs over
// (Horovod's ProcessSet(mpi_comm)); processes outside the set pass nil.
// Init learns the set's global ranks from the members. The set's
// collectives run over a communicator of the runtime's own, split from the
// global one, with its ranks in ascending global order; c is not used after
// Init.
func ProcessSetFromComm(c comm.Communicator) *ProcessSet {
	return &ProcessSet{from: c, isComm: true, id: -1, rank: -1}
}

// ID returns the set's id: 0 for the global set, -1 before registration.
func (ps *ProcessSet) ID() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.id
}

// Ranks returns the set's global ranks, ascending (nil for a set made by
// ProcessSetFromComm before Init).
func (ps *ProcessSet) Ranks() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.Clone(ps.ranks)
}

// Size returns the number of ranks in the set.
func (ps *ProcessSet) Size() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.ranks)
}

// Rank returns this process's rank within the set (its index in Ranks),
// or -1 when it is not a member or the set is not registered.
func (ps *ProcessSet) Rank() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.rank
}

// Included reports whether this process is a member of the registered set.
func (ps *ProcessSet) Included() bool { return ps.Rank() >= 0 }

// String formats the set as Horovod prints one:
// "ProcessSet(process_set_id=1, ranks=[0, 2], mpi_comm=None)", with
// process_set_id=None before registration (and after a failed one) and
// mpi_comm=<communicator> for a set made by ProcessSetFromComm.
func (ps *ProcessSet) String() string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.format()
}

// format is String with ps.mu held.
func (ps *ProcessSet) format() string {
	var b strings.Builder
	b.WriteString("ProcessSet(process_set_id=")
	if ps.id < 0 {
		b.WriteString("None")
	} else {
		b.WriteString(strconv.Itoa(ps.id))
	}
	if ps.ranks == nil && ps.isComm {
		b.WriteString(", ranks=None, mpi_comm=<communicator>)")
		return b.String()
	}
	b.WriteString(", ranks=[")
	for i, r := range ps.ranks {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(r))
	}
	if ps.isComm {
		b.WriteString("], mpi_comm=<communicator>)")
	} else {
		b.WriteString("], mpi_comm=None)")
	}
	return b.String()
}

// The process set error codes, Horovod's HOROVOD_PROCESS_SET_ERROR_*.
const (
	ProcessSetErrorInit     = -1 // the runtime is not initialised; mismatched or invalid registration
	ProcessSetErrorDynamic  = -2 // adding or removing without dynamic process sets
	ProcessSetErrorUnknown  = -3 // the set does not exist, or was removed
	ProcessSetErrorForeign  = -4 // this process is not a member of the set
	ProcessSetErrorShutdown = -5 // the runtime was shut down, or failed
	ProcessSetErrorExisting = -6 // a set with these ranks exists already
)

// The process set errors, by kind; a *ProcessSetError wraps one of them
// (errors.Is).
var (
	ErrProcessSetInit     = errors.New("hvd: process sets could not be registered")
	ErrDynamicProcessSets = errors.New("hvd: process sets can only be added or removed after Init with dynamic process sets (hvd.WithDynamicProcessSets or HOROVOD_DYNAMIC_PROCESS_SETS=1)")
	ErrUnknownProcessSet  = errors.New("hvd: process set does not exist, or has not been registered")
	ErrForeignProcessSet  = errors.New("hvd: this process is not a member of the process set")
	ErrExistingProcessSet = errors.New("hvd: a process set with these ranks exists already")
)

// ProcessSetError is a failed process set registration, removal or
// collective: Code is Horovod's error code (ProcessSetError*), Op the
// operation ("Allreduce", "AddProcessSet"), Message the text.
type ProcessSetError struct {
	Op      string
	Code    int
	Message string

	cause error // the runtime's own error, for ProcessSetErrorInit before Init and ProcessSetErrorShutdown
}

// Error implements the error interface.
func (e *ProcessSetError) Error() string {
	if e.Op == "" {
		return "hvd: " + e.Message
	}
	return "hvd: " + e.Op + ": " + e.Message
}

// Unwrap returns the sentinel of the error's kind and, where the runtime
// was not running, the runtime's own error (ErrNotInitialized, or the
// shutdown and its cause).
func (e *ProcessSetError) Unwrap() []error {
	var s error
	switch e.Code {
	case ProcessSetErrorInit:
		s = ErrProcessSetInit
	case ProcessSetErrorDynamic:
		s = ErrDynamicProcessSets
	case ProcessSetErrorUnknown:
		s = ErrUnknownProcessSet
	case ProcessSetErrorForeign:
		s = ErrForeignProcessSet
	case ProcessSetErrorExisting:
		s = ErrExistingProcessSet
	case ProcessSetErrorShutdown:
		s = ErrShutdown
	}
	var out []error
	for _, err := range []error{s, e.cause} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// notRunning turns the error of a registration made while the runtime is
// not running into Horovod's process set codes: ProcessSetErrorInit before
// Init (wrapping ErrNotInitialized too), ProcessSetErrorShutdown after
// Shutdown or a failure (wrapping the shutdown error and its cause). Other
// errors are returned as they are.
func notRunning(op string, err error) error {
	var pe *ProcessSetError
	switch {
	case err == nil || errors.As(err, &pe):
		return err
	case errors.Is(err, ErrNotInitialized):
		return &ProcessSetError{Op: op, Code: ProcessSetErrorInit, Message: strings.TrimPrefix(err.Error(), "hvd: "), cause: err}
	case errors.Is(err, ErrShutdown):
		return &ProcessSetError{Op: op, Code: ProcessSetErrorShutdown, Message: strings.TrimPrefix(err.Error(), "hvd: "), cause: err}
	}
	return err
}

// MismatchedProcessSetsText is Horovod's error when the processes register
// different numbers of static process sets.
const MismatchedProcessSetsText = "Different ranks tried to set up mismatching numbers of process sets"

// AdasumProcessSetText is Horovod's error for an Adasum reduction asked of
// a process set other than the global one (the collective fails with an
// error wrapping ErrInvalidArgument that carries it, at once, on the rank
// that asked).
const AdasumProcessSetText = "Adasum does not support non-global process sets yet."

// WithProcessSets registers static process sets at Init, in the order
// given, with ids 1, 2, ...: every process must pass the same sets in the
// same order (Init fails on every rank otherwise, with a *ProcessSetError
// of code ProcessSetErrorInit).
func WithProcessSets(sets ...*ProcessSet) Option {
	return func(o *options) { o.sets = append(o.sets, sets...) }
}

// WithDynamicProcessSets allows Runtime.AddProcessSet and RemoveProcessSet
// after Init (Horovod's hvd.init(process_sets="dynamic")), as
// HOROVOD_DYNAMIC_PROCESS_SETS=1 does.
func WithDynamicProcessSets() Option { return func(o *options) { o.dynamic = true } }

// InProcessSet runs a collective within ps instead of the global set. A
// broadcast's root is still a global rank, which must be in ps.
func InProcessSet(ps *ProcessSet) CallOption { return func(o *callOptions) { o.set = ps } }

// pset is the runtime's record of a registered process set.
type pset struct {
	ps         *ProcessSet
	id         int
	ranks      []int // sorted global ranks
	rank, size int   // this process's rank in the set (-1 outside) and the set's size
	q          *queue
	loop       *loop             // members only
	com        comm.Communicator // members of a non-global set: the set's communicator
}

// globalRank translates a rank within the set into a global rank.
func (p *pset) globalRank(r int) int {
	if r < 0 || r >= len(p.ranks) {
		return -1
	}
	return p.ranks[r]
}

// setRank translates a global rank into a rank within the set, or -1.
func (p *pset) setRank(g int) int {
	i, ok := slices.BinarySearch(p.ranks, g)
	if !ok {
		return -1
	}
	return i
}

// GlobalProcessSet returns the global process set (id 0, every rank), or
// nil before Init.
func (r *Runtime) GlobalProcessSet() *ProcessSet {
	r.psMu.Lock()
	defer r.psMu.Unlock()
	if p := r.psets[0]; p != nil {
		return p.ps
	}
	return nil
}

// ProcessSets returns the registered process sets, the global one first,
// by id.
func (r *Runtime) ProcessSets() []*ProcessSet {
	r.psMu.Lock()
	defer r.psMu.Unlock()
	ids := make([]int, 0, len(r.psets))
	for id := range r.psets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*ProcessSet, len(ids))
	for i, id := range ids {
		out[i] = r.psets[id].ps
	}
	return out
}

// setFor resolves a call's process set: the global one when none is given.
func (r *Runtime) setFor(op string, ps *ProcessSet) (*pset, error) {
	r.psMu.Lock()
	defer r.psMu.Unlock()
	if ps == nil {
		if p := r.psets[0]; p != nil {
			return p, nil
		}
		return nil, r.notInitialized()
	}
	ps.mu.Lock()
	id, owner, gen, removed := ps.id, ps.owner, ps.gen, ps.removed
	ps.mu.Unlock()
	p := r.psets[id]
	if owner != r || gen != r.initGen || removed || p == nil || p.ps != ps {
		return nil, &ProcessSetError{Op: op, Code: ProcessSetErrorUnknown,
			Message: "Process set provided does not exist, or has not been registered."}
	}
	if p.rank < 0 {
		return nil, &ProcessSetError{Op: op, Code: ProcessSetErrorForeign,
			Message: fmt.Sprintf("Rank %d is not a member of the provided process set.", r.rank)}
	}
	return p, nil
}

// checkRanks validates a process set's ranks for a job of size ranks.
func checkRanks(ranks []int, size int) error {
	if len(ranks) == 0 {
		return invalid("a process set needs at least one rank")
	}
	for i, g := range ranks {
		if g < 0 || g >= size {
			return invalid("process set rank %d is out of range for %d ranks", g, size)
		}
		if i > 0 && ranks[i-1] == g {
			return invalid("process set names rank %d twice", g)
		}
	}
	return nil
}

// rootInSet translates a broadcast's root, a global rank, into a rank
// within the set, refusing a root outside it.
func (p *pset) rootInSet(root int) (int, error) {
	sr := p.setRank(root)
	if sr < 0 {
		return -1, invalid("broadcast received invalid root rank %d for provided process set", root)
	}
	return sr, nil
}
