package runtime

// Dynamic process sets: AddProcessSet and RemoveProcessSet after Init,
// carried by a control entry of the global set that every rank performs
// at the same point.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/steps"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

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
	all, err := steps.Gather(l.com, so.encode())
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
