package runtime

// The Init protocol of process sets: the global set and the static sets
// given to Init, registered on every process alike.

import (
	"fmt"
	"slices"

	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/steps"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

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
	count, err := r.agreeSetsInit(g, static)
	if err != nil || count == 0 {
		return err // count 0: no process registers a static set
	}
	// Every process must list the same ranks for each set.
	var sr wire.SetRanks
	for _, ps := range static {
		sr.Sets = append(sr.Sets, ps.Ranks())
	}
	all, err := steps.Gather(g.com, wire.AppendSetRanks(nil, &sr))
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

// agreeSetsInit claims the static sets for this Init and runs the first
// exchange of the processes' sets: every process tells the others what it
// found wrong alone, so that every process fails alike, and its rank in
// each set made from a communicator (or -1), whose members, ordered by
// that rank, are the set. It returns how many static sets the processes
// register (0: none does).
func (r *Runtime) agreeSetsInit(g *loop, static []*ProcessSet) (int, error) {
	local, fromComm := r.claimStatic(static)
	init := wire.SetsInit{Problem: local, Count: len(static)}
	for _, i := range fromComm {
		sr := -1
		if c := static[i].from; c != nil {
			sr = c.Rank()
		}
		init.CommRanks = append(init.CommRanks, sr)
	}
	all, err := steps.Gather(g.com, wire.AppendSetsInit(nil, &init))
	if err != nil {
		return 0, fmt.Errorf("gathering the process sets: %w", err)
	}
	count, commSets, fault := cycle.InitSets(all)
	switch {
	case fault == nil:
	case fault.Kind == cycle.SetsBadEncoding:
		return 0, fmt.Errorf("process sets from rank %d: bad encoding", fault.Rank)
	case fault.Kind == cycle.SetsProblem:
		return 0, &ProcessSetError{Op: "Init", Code: ProcessSetErrorInit, Message: fmt.Sprintf("rank %d: %s", fault.Rank, fault.Problem)}
	default:
		return 0, &ProcessSetError{Op: "Init", Code: ProcessSetErrorInit, Message: MismatchedProcessSetsText +
			fmt.Sprintf(" (rank 0 has %d, rank %d has %d)", fault.Count0, fault.Rank, fault.Count)}
	}
	for j, i := range fromComm {
		static[i].mu.Lock()
		static[i].ranks = commSets[j]
		static[i].mu.Unlock()
	}
	return count, nil
}

// claimStatic makes the static sets this Init's, and returns what is wrong
// with them that this process finds alone ("" if nothing) and the indices
// of the sets made from communicators.
func (r *Runtime) claimStatic(static []*ProcessSet) (string, []int) {
	var fromComm []int
	for i, ps := range static {
		if ps == nil {
			return fmt.Sprintf("process set %d is nil", i), fromComm
		}
		local := ""
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
			return local, fromComm
		}
	}
	return "", fromComm
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
