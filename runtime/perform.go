package runtime

import (
	"errors"
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// The controller's side of performing a response: it takes the response's
// entries from the queue, hands them to the performer (performer.go), and
// then, in one place, draws them on the timeline and completes or fails
// their handles.

// perform executes one response. It returns an error only when the
// communicator has failed and the runtime must stop.
func (l *loop) perform(resp *wire.Response) error {
	if l.log.Trace().Enabled() {
		l.log.tracePerform(resp)
	}
	if resp.Type == wire.Error {
		for _, name := range resp.Names {
			if e := l.q.take(name); e != nil {
				e.h.fail(&OpError{Name: name, Message: resp.Error})
			}
		}
		return nil
	}
	start := time.Now()
	if err := l.take(resp); err != nil {
		return err
	}
	switch e := l.ents[0]; {
	case e.setOp != nil:
		// A process set registration (processset_dynamic.go); it
		// completes the handle itself.
		if err := l.performSetOp(e); err != nil {
			return collectiveErr(l.ents, err)
		}
		l.ents = l.ents[:0]
		return nil
	case wire.RequestType(resp.Type) == wire.Adasum && onGPU(resp, l.rank):
		for _, e := range l.ents {
			if e.h != nil {
				e.h.fail(&OpError{Name: e.req.Name, Message: adasumGPUText})
			}
		}
		return nil
	case wire.RequestType(resp.Type) == wire.Join:
		l.st.Unjoin()
		e.h.joinRank = l.set.globalRank(int(resp.LastJoinedRank)) // Join reports a global rank
	}
	err := l.p.perform(resp, l.ents)
	l.tl.response(l.ents, resp.Type.String(), start, time.Now(), l.p.acts)
	if err != nil {
		return collectiveErr(l.ents, err)
	}
	finish(l.ents)
	return nil
}

// take takes the entries of resp from the queue into l.ents: every name of
// an allreduce-like response (see entries), the one name of the others.
func (l *loop) take(resp *wire.Response) error {
	switch wire.RequestType(resp.Type) {
	case wire.Allreduce, wire.Adasum:
		return l.entries(resp)
	}
	e := l.q.take(resp.Names[0])
	if e == nil {
		return fmt.Errorf("internal: response %v for %q, which this rank did not submit", resp.Type, resp.Names[0])
	}
	l.ents = append(l.ents[:0], e)
	return nil
}

// entries takes the entries of an allreduce-like response; a joined rank
// contributes zeros for names it never submitted.
func (l *loop) entries(resp *wire.Response) error {
	// The entries of cached responses are known already (l.cyc.respEnts), one
	// per source response: no name is looked up then.
	l.ents = l.q.takeAll(l.ents[:0], resp.Names, l.cyc.respEnts, l.cyc.sources)
	for i, name := range resp.Names {
		if e := l.ents[i]; e == nil {
			if !l.st.Joined() {
				return fmt.Errorf("internal: response for %q, which this rank did not submit", name)
			}
			z := tensor.New(resp.DType, wire.IntShape(resp.Shapes[i])...)
			l.ents[i] = &entry{req: wire.Request{Name: name, Type: wire.RequestType(resp.Type), DType: resp.DType, Shape: resp.Shapes[i]},
				in: z, out: z}
		}
	}
	return nil
}

// performRun reduces ents, which lie in one run of memory on every rank
// (runOfMemory, agreed in the static schedule's header), in one reduction
// where they lie: the allreduce of their first response's type,
// reduction and scaling (every response of the run has the same).
func (l *loop) performRun(first *wire.Response, ents []*entry) error {
	l.performed = true
	if !l.q.release(ents) {
		return errors.New("internal: a request left the flight before its static unit was performed")
	}
	l.ents = append(l.ents[:0], ents...)
	start := time.Now()
	err := l.p.reduceRun(first, l.ents)
	l.tl.response(l.ents, first.Type.String(), start, time.Now(), l.p.acts)
	if err != nil {
		return collectiveErr(l.ents, err)
	}
	l.tl.flush()
	finish(l.ents)
	return nil
}

// finish completes the entries of a performed response. Consecutive
// entries of one handle (a group's tensors) count down its pending tensors
// with one atomic operation.
func finish(ents []*entry) {
	for i := 0; i < len(ents); {
		h := ents[i].h
		j := i
		for ; j < len(ents) && ents[j].h == h; j++ {
			if h != nil {
				h.outs[ents[j].idx] = ents[j].out
			}
		}
		if h != nil {
			if h.pending.Add(-int32(j-i)) == 0 {
				h.once.Do(func() { close(h.done) })
			}
		}
		i = j
	}
}

// collectiveErr decides what a communicator error means: arguments that
// disagree are the operation's error, anything else stops the runtime.
func collectiveErr(ents []*entry, err error) error {
	var mm *comm.MismatchError
	if errors.As(err, &mm) {
		for _, e := range ents {
			if e.h != nil {
				e.h.fail(fmt.Errorf("hvd: %s: %w", e.req.Name, err))
			}
		}
		return nil
	}
	return err
}
