package runtime

// The global loop's registry of process sets: a set added (with its
// communicator and loop) or removed on every rank alike, at Init or by a
// dynamic registration.

import (
	"fmt"
	"slices"
)

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
		sl.p.chunk, sl.p.fuseChunk, sl.planner.MaxFused = l.p.chunk, l.p.fuseChunk, l.planner.MaxFused
		sl.p.gpu = l.p.gpu.ForSet(sl.log.Logger)
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
	l.p.closeHier()
	if err := l.p.gpu.Close(); err != nil {
		l.log.Error().Err(err).Msg("releasing the process set's GPU resources")
	}
	return l.com.Close()
}
