package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
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

// initProcessSets registers the global set and the static sets, on every
// rank, before the loop starts (a collective over the global communicator).
func (r *Runtime) initProcessSets(g *loop, static []*ProcessSet, dynamic bool) error {
	r.initGen++
	global := &ProcessSet{ranks: make([]int, r.size), id: 0, owner: r, gen: r.initGen, rank: r.rank}
	for i := range global.ranks {
		global.ranks[i] = i
	}
	gp := &pset{ps: global, id: 0, ranks: global.ranks, rank: r.rank, size: r.size, q: &r.q, loop: g}
	g.set = gp
	r.psMu.Lock()
	r.psets = map[int]*pset{0: gp}
	r.freeIDs, r.nextID, r.dynamic, r.psSeq = nil, 1, dynamic, 0
	r.psMu.Unlock()
	if len(static) == 0 && r.size == 1 {
		return nil
	}
	// What one process finds wrong alone it tells the others in the
	// first exchange, so that every process fails alike. Sets from
	// communicators: every process says its rank in each (or -1); the
	// members, ordered by that rank, are the set.
	var fromComm []int
	local := ""
	for i, ps := range static {
		if ps == nil {
			local = fmt.Sprintf("process set %d is nil", i)
			break
		}
		ps.mu.Lock()
		switch {
		case ps.owner != nil && ps.owner != r:
			local = fmt.Sprintf("process set %d belongs to another Runtime: every Runtime needs its own ProcessSet values "+
				"(with StartLocal or RunLocal, which give every rank the same options, use WithDynamicProcessSets and AddProcessSet)", i)
		case ps.owner == r && ps.gen == r.initGen:
			local = fmt.Sprintf("process set %d is given twice", i)
		default:
			ps.owner, ps.gen, ps.id, ps.rank, ps.removed = r, r.initGen, -1, -1, false
		}
		if ps.isComm {
			fromComm = append(fromComm, i)
		}
		ps.mu.Unlock()
		if local != "" {
			break
		}
	}
	init := wire.SetsInit{Problem: local, Count: len(static)}
	for _, i := range fromComm {
		sr := -1
		if c := static[i].from; c != nil {
			sr = c.Rank()
		}
		init.CommRanks = append(init.CommRanks, sr)
	}
	all, err := gatherBytes(g.com, wire.AppendSetsInit(nil, &init))
	if err != nil {
		return fmt.Errorf("gathering the process sets: %w", err)
	}
	count, commSets, fault := cycle.InitSets(all)
	switch {
	case fault == nil:
	case fault.Kind == cycle.SetsBadEncoding:
		return fmt.Errorf("process sets from rank %d: bad encoding", fault.Rank)
	case fault.Kind == cycle.SetsProblem:
		return &ProcessSetError{Op: "Init", Code: ProcessSetErrorInit, Message: fmt.Sprintf("rank %d: %s", fault.Rank, fault.Problem)}
	default:
		return &ProcessSetError{Op: "Init", Code: ProcessSetErrorInit, Message: MismatchedProcessSetsText +
			fmt.Sprintf(" (rank 0 has %d, rank %d has %d)", fault.Count0, fault.Rank, fault.Count)}
	}
	for j, i := range fromComm {
		static[i].mu.Lock()
		static[i].ranks = commSets[j]
		static[i].mu.Unlock()
	}
	if count == 0 {
		return nil // no process registers a static set
	}
	// Every process must list the same ranks for each set.
	var sr wire.SetRanks
	for _, ps := range static {
		sr.Sets = append(sr.Sets, ps.Ranks())
	}
	all, err = gatherBytes(g.com, wire.AppendSetRanks(nil, &sr))
	if err != nil {
		return fmt.Errorf("gathering the process sets: %w", err)
	}
	if rk := cycle.Differing(all); rk >= 0 {
		return &ProcessSetError{Op: "Init", Code: ProcessSetErrorInit,
			Message: fmt.Sprintf("Different ranks tried to set up mismatching process sets: rank %d's differ from rank 0's", rk)}
	}
	for i, ps := range static {
		ranks := ps.Ranks()
		if err := checkRanks(ranks, r.size); err != nil {
			return &ProcessSetError{Op: "Init", Code: ProcessSetErrorInit, Message: fmt.Sprintf("process set %d: %v", i, err)}
		}
		if id := r.findSet(ranks); id >= 0 {
			return &ProcessSetError{Op: "Init", Code: ProcessSetErrorExisting,
				Message: fmt.Sprintf("Horovod could not be initialized because process_sets entry number %d is a duplicate: %v (of process set %d)", i, ps, id)}
		}
		if err := g.addSet(ps, ranks); err != nil {
			return err
		}
	}
	return nil
}

// findSet returns the id of the registered set with exactly ranks, or -1.
func (r *Runtime) findSet(ranks []int) int {
	r.psMu.Lock()
	defer r.psMu.Unlock()
	for id, p := range r.psets {
		if slices.Equal(p.ranks, ranks) {
			return id
		}
	}
	return -1
}

// addSet registers ps with ranks on every rank: a collective over the
// global communicator, which it splits into the set's own (the members'
// loops then run the set's negotiations over it). Called on the global
// loop: at Init, or where every rank performs the same registration.
func (l *loop) addSet(ps *ProcessSet, ranks []int) error {
	r := l.r
	color := -1
	if _, ok := slices.BinarySearch(ranks, r.rank); ok {
		color = 0
	}
	sub, err := l.com.Split(color, r.rank)
	if color < 0 {
		sub, err = nil, nil // a non-member joins no group
	}
	if err != nil {
		return fmt.Errorf("creating the process set's communicator: %w", err)
	}
	r.psMu.Lock()
	id := r.nextID
	if len(r.freeIDs) > 0 {
		id, r.freeIDs = r.freeIDs[0], r.freeIDs[1:]
	} else {
		r.nextID++
	}
	r.psMu.Unlock()
	p := &pset{ps: ps, id: id, ranks: ranks, rank: -1, size: len(ranks)}
	if sub != nil {
		p.rank, p.com = sub.Rank(), sub
		p.q = new(queue)
		p.q.resetShared(r.q.wake)
		sl, err := newLoop(r, sub, p.q)
		if err != nil {
			sub.Close()
			return err
		}
		sl.set, sl.global = p, l
		sl.chunk, sl.fuseChunk, sl.planner.MaxFused = l.chunk, l.fuseChunk, l.planner.MaxFused
		sl.gpu = l.gpu.ForSet(sl.log)
		sl.set = p
		if err := sl.openHier(ranks); err != nil {
			sub.Close()
			return err
		}
		p.loop = sl
	}
	ps.mu.Lock()
	ps.ranks, ps.id, ps.owner, ps.gen, ps.rank, ps.removed = ranks, id, r, r.initGen, p.rank, false
	ps.mu.Unlock()
	r.psMu.Lock()
	r.psets[id] = p
	r.psMu.Unlock()
	if p.loop != nil {
		l.subs = append(l.subs, p.loop)
		slices.SortFunc(l.subs, func(a, b *loop) int { return a.set.id - b.set.id })
	}
	l.log.Debug().Int("process_set", id).Ints("ranks", ranks).Int("set_rank", p.rank).Msg("process set registered")
	return nil
}

// removeSet unregisters the set with id on every rank: its pending
// operations fail, its communicator is closed and its id is free again.
func (l *loop) removeSet(id int) error {
	r := l.r
	r.psMu.Lock()
	p := r.psets[id]
	delete(r.psets, id)
	r.freeIDs = append(r.freeIDs, id)
	r.psMu.Unlock()
	p.ps.mu.Lock()
	p.ps.removed, p.ps.rank = true, -1
	p.ps.mu.Unlock()
	if p.loop == nil {
		return nil
	}
	l.subs = slices.DeleteFunc(l.subs, func(s *loop) bool { return s == p.loop })
	p.q.close(&ProcessSetError{Op: "RemoveProcessSet", Code: ProcessSetErrorUnknown,
		Message: fmt.Sprintf("process set %d was removed while this operation was pending", id)})
	return p.loop.closeSet()
}

// closeSet releases what a non-global set's loop holds, its communicator
// last, and returns the communicator's Close error.
func (l *loop) closeSet() error {
	l.closeHier()
	if err := l.gpu.Close(); err != nil {
		l.log.Error().Err(err).Msg("releasing the process set's GPU resources")
	}
	return l.com.Close()
}

// setOp is a dynamic registration, carried by a control entry of the
// global set: every rank must submit the same one, in the same order.
type setOp struct {
	add   bool
	ranks []int // add: the set's ranks
	id    int   // remove: the set's id
	set   *ProcessSet
}

// encode returns the registration as every rank compares it.
func (o *setOp) encode() []byte {
	return wire.AppendSetOp(nil, &wire.SetOp{Add: o.add, Ranks: o.ranks, ID: o.id})
}

func (o *setOp) String() string {
	if o.add {
		return fmt.Sprintf("add %v", o.ranks)
	}
	return fmt.Sprintf("remove %d", o.id)
}

// processSetPrefix starts the names of the registrations' control entries;
// the names of user operations always start with the operation's name.
const processSetPrefix = "process_set."

// AddProcessSet registers a process set of the given global ranks after
// Init and returns it (Horovod's hvd.add_process_set). It needs dynamic
// process sets (WithDynamicProcessSets or HOROVOD_DYNAMIC_PROCESS_SETS=1),
// and every process must call it, with the same ranks, in the same order
// among its AddProcessSet and RemoveProcessSet calls: it returns once
// every process has, with the same error on every process where they
// disagree or where a set of these ranks exists already
// (ErrExistingProcessSet). A process outside the set gets it too, with
// Included false.
func (r *Runtime) AddProcessSet(ctx context.Context, ranks []int) (*ProcessSet, error) {
	if err := r.checkRunning(); err != nil {
		return nil, notRunning("AddProcessSet", err)
	}
	rs := slices.Clone(ranks)
	slices.Sort(rs)
	if err := checkRanks(rs, r.Size()); err != nil {
		return nil, err
	}
	ps := &ProcessSet{ranks: rs, id: -1, rank: -1}
	if err := r.setControl(ctx, "AddProcessSet", &setOp{add: true, ranks: rs, set: ps}); err != nil {
		return nil, err
	}
	return ps, nil
}

// RemoveProcessSet unregisters ps on every process (Horovod's
// hvd.remove_process_set): every process must call it in the same order
// among its AddProcessSet and RemoveProcessSet calls. Operations of ps that
// are still pending fail; later ones fail with ErrUnknownProcessSet. The
// global set cannot be removed.
func (r *Runtime) RemoveProcessSet(ctx context.Context, ps *ProcessSet) error {
	if err := r.checkRunning(); err != nil {
		return notRunning("RemoveProcessSet", err)
	}
	if ps == nil {
		return invalid("RemoveProcessSet of a nil process set")
	}
	ps.mu.Lock()
	id, owner, gen, removed := ps.id, ps.owner, ps.gen, ps.removed
	ps.mu.Unlock()
	r.psMu.Lock()
	known := owner == r && gen == r.initGen && !removed && r.psets[id] != nil
	r.psMu.Unlock()
	if id == 0 && known {
		return invalid("the global process set cannot be removed")
	}
	if !known {
		return &ProcessSetError{Op: "RemoveProcessSet", Code: ProcessSetErrorUnknown,
			Message: "Process set provided does not exist, or has not been registered."}
	}
	return r.setControl(ctx, "RemoveProcessSet", &setOp{id: id, set: ps})
}

// setControl submits a registration to the global set and waits for every
// rank to have performed it.
func (r *Runtime) setControl(ctx context.Context, op string, so *setOp) error {
	r.psMu.Lock()
	dynamic := r.dynamic
	r.psSeq++
	seq := r.psSeq
	r.psMu.Unlock()
	if !dynamic {
		verb := "adding"
		if !so.add {
			verb = "removing"
		}
		return &ProcessSetError{Op: op, Code: ProcessSetErrorDynamic,
			Message: "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow " + verb + " process sets after Horovod initialization " +
				"(or pass hvd.WithDynamicProcessSets() to Init)."}
	}
	h := newHandle(1)
	e := &entry{req: wire.Request{Rank: int32(r.Rank()), Type: wire.Barrier, Name: processSetPrefix + strconv.FormatUint(seq, 10),
		Device: wire.CPU, Prescale: 1, Postscale: 1}, h: h, enqueued: time.Now(), setOp: so}
	gp, err := r.setFor(op, nil)
	if err != nil {
		return notRunning(op, err)
	}
	if err := r.enqueue(gp, e); err != nil {
		return notRunning(op, err)
	}
	r.q.signal()
	return notRunning(op, h.Wait(ctx))
}

// performSetOp carries out a registration on the global loop, where every
// rank performs it at the same point: the ranks compare what they submitted
// and, when it agrees and is valid, add or remove the set alike. A
// disagreement or an invalid registration fails every rank's handle with
// the same error; only a transport failure is returned.
func (l *loop) performSetOp(e *entry) error {
	so := e.setOp
	all, err := gatherBytes(l.com, so.encode())
	if err != nil {
		return fmt.Errorf("gathering process set registrations: %w", err)
	}
	op := "RemoveProcessSet"
	if so.add {
		op = "AddProcessSet"
	}
	if rk := cycle.Differing(all); rk >= 0 {
		e.h.fail(&ProcessSetError{Op: op, Code: ProcessSetErrorInit,
			Message: fmt.Sprintf("Different ranks tried to add or remove mismatching process sets: rank %d asked to %v, rank 0 something else", rk, so)})
		return nil
	}
	r := l.r
	if so.add {
		if id := r.findSet(so.ranks); id >= 0 {
			e.h.fail(&ProcessSetError{Op: "AddProcessSet", Code: ProcessSetErrorExisting,
				Message: fmt.Sprintf("Attempted to add a duplicate process set: %v (process set %d has these ranks)", so.set, id)})
			return nil
		}
		if err := l.addSet(so.set, so.ranks); err != nil {
			return err
		}
	} else {
		if err := l.removeSet(so.id); err != nil {
			l.log.Warn().Err(err).Int("process_set", so.id).Msg("closing a removed process set's communicator")
		}
	}
	e.h.finishOne()
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
