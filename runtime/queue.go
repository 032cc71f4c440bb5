package runtime

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// entry is one tensor of an enqueued operation (Horovod's TensorTableEntry).
type entry struct {
	req     wire.Request
	in, out *tensor.Tensor
	splits  []int // alltoall: rows to send to each rank, or nil
	// exchange makes an Alltoall entry a point-to-point exchange with
	// these peers (exchange.go); nil for a plain alltoall.
	exchange *exchangePeers
	h        *Handle
	idx      int // index of this tensor in h.outs
	enqueued time.Time
	// bit is the response cache bit the loop found this name at last
	// (a hint, checked before use: see cache.LookupHint); -1 when none.
	// Only the loop touches it.
	bit int
	// setOp is the registration a control entry of the global set
	// carries (AddProcessSet, RemoveProcessSet), or nil.
	setOp *setOp
	// owned entries belong to an AllreduceGroup: they stay in the table
	// from the group's creation to its Close, and idle says whether they
	// are out of flight. Guarded by queue.mu.
	owned, idle bool
}

// queue is the tensor queue: the table of in-flight names and the FIFO of
// requests the loop has not yet taken.
type queue struct {
	mu sync.Mutex
	// table maps the names in flight to their entries, and the names of
	// live AllreduceGroups to theirs (idle between steps): a group's
	// steps then cost no hashing here.
	table    map[string]*entry
	inflight int // entries in flight
	gen      int // counts resets: a group belongs to one generation
	fifo     []*entry
	closed   error // non-nil once the loop has stopped
	// wake tells the loop to start a cycle now: a group of requests was
	// enqueued, or a caller waits on a handle.
	wake chan struct{}
	// waiters counts callers blocked in Handle.Wait.
	waiters atomic.Int32
	// eager: every add wakes the loop (the static schedule is locked:
	// the loop sleeps past the ticks until something arrives).
	eager atomic.Bool
}

func (q *queue) reset() {
	q.mu.Lock()
	q.table = make(map[string]*entry)
	q.inflight = 0
	q.gen++
	q.fifo = nil
	q.closed = nil
	q.wake = make(chan struct{}, 1)
	q.mu.Unlock()
	q.eager.Store(false)
}

// resetShared resets q for a process set's queue, which wakes the loop
// through the global queue's channel.
func (q *queue) resetShared(wake chan struct{}) {
	q.reset()
	q.mu.Lock()
	q.wake = wake
	q.mu.Unlock()
}

// add inserts entries atomically: all names must be free (and distinct).
func (q *queue) add(es ...*entry) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.addLocked(es)
}

// addOwned puts a group's entries, owned in generation gen, in flight; they
// must be idle.
func (q *queue) addOwned(gen int, es []*entry) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if gen != q.gen {
		return ErrGroupClosed
	}
	return q.addLocked(es)
}

// addLocked is add with q.mu held.
func (q *queue) addLocked(es []*entry) error {
	if q.closed != nil {
		return q.closed
	}
	for i, e := range es {
		if e.owned {
			if !e.idle {
				q.unadd(es[:i])
				return ErrDuplicateName
			}
			e.idle = false
		} else {
			if _, ok := q.table[e.req.Name]; ok {
				q.unadd(es[:i])
				return ErrDuplicateName
			}
			q.table[e.req.Name] = e
		}
		if e.h != nil && e.h.q != q { // a grouped op's handle has q already (see enqueueGroup)
			e.h.q = q
		}
	}
	q.inflight += len(es)
	q.fifo = append(q.fifo, es...)
	return nil
}

// unadd undoes add for es; q.mu is held.
func (q *queue) unadd(es []*entry) {
	for _, e := range es {
		if e.owned {
			e.idle = true
		} else {
			delete(q.table, e.req.Name)
		}
	}
}

// own enters a group's entries in the table, idle, for the group's life.
// Their names must be free. It returns the queue's generation.
func (q *queue) own(es []*entry) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed != nil {
		return 0, q.closed
	}
	for i, e := range es {
		if _, ok := q.table[e.req.Name]; ok {
			for _, f := range es[:i] {
				delete(q.table, f.req.Name)
			}
			return 0, ErrDuplicateName
		}
		e.owned, e.idle = true, true
		q.table[e.req.Name] = e
	}
	return q.gen, nil
}

// disown removes a group's idle entries from the table (generation gen);
// it fails while they are in flight.
func (q *queue) disown(es []*entry, gen int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if gen != q.gen {
		return nil // the runtime was shut down since: the table is new
	}
	for _, e := range es {
		if !e.idle {
			return ErrDuplicateName
		}
	}
	for _, e := range es {
		if q.table[e.req.Name] == e {
			delete(q.table, e.req.Name)
		}
	}
	return nil
}

// signal wakes the loop for an early cycle.
func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// hot reports whether a caller waits while names are still in flight: the
// loop then cycles again at once instead of sleeping until the tick.
func (q *queue) hot() bool {
	if q.waiters.Load() == 0 {
		return false
	}
	q.mu.Lock()
	n := q.inflight
	q.mu.Unlock()
	return n > 0
}

// pop moves the FIFO's entries to dst.
func (q *queue) pop(dst []*entry) []*entry {
	q.mu.Lock()
	dst = append(dst, q.fifo...)
	clear(q.fifo)
	q.fifo = q.fifo[:0]
	q.mu.Unlock()
	return dst
}

// pushFront returns entries the loop could not perform yet to the head of
// the FIFO, in order. The entries are copied: es belongs to the loop, which
// reuses it next cycle, and the FIFO must never share its backing array
// (appending to an empty FIFO would otherwise return es itself, and later
// adds would write into the loop's slice).
func (q *queue) pushFront(es []*entry) {
	if len(es) == 0 {
		return
	}
	q.mu.Lock()
	q.fifo = slices.Insert(q.fifo, 0, es...)
	q.mu.Unlock()
}

// take removes name from the flight and returns its entry (nil if it is
// not in flight).
func (q *queue) take(name string) *entry {
	q.mu.Lock()
	e := q.takeLocked(name)
	q.mu.Unlock()
	return e
}

// takeAll removes names from the flight, under one lock (a fused response
// has hundreds), and appends their entries to dst, nil for a name not in
// flight. When sources has one index per name, known[sources[i]] is the
// entry of names[i] as far as the loop knows (a cached response's, or nil),
// taken then without looking the name up when it is still in flight under
// that name.
func (q *queue) takeAll(dst []*entry, names []string, known []*entry, sources []int) []*entry {
	useKnown := len(sources) == len(names)
	q.mu.Lock()
	for i, name := range names {
		var e *entry
		if useKnown {
			if c := known[sources[i]]; c != nil && !c.idle && c.req.Name == name {
				e = c
				q.releaseLocked(e)
			}
		}
		if e == nil {
			e = q.takeLocked(name)
		}
		dst = append(dst, e)
	}
	q.dropTombstones()
	q.mu.Unlock()
	return dst
}

// release takes es, entries the loop holds, out of the flight under one
// lock, and reports whether every one was still in flight (else it takes
// none of those that follow).
func (q *queue) release(es []*entry) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.dropTombstones()
	for _, e := range es {
		if e.idle || (!e.owned && q.table[e.req.Name] != e) {
			return false
		}
		q.releaseLocked(e)
	}
	return true
}

// dropTombstones empties an empty table, dropping its deleted slots'
// tombstones: the names of single calls are inserted and deleted every
// step, and the probes through them made the table's operations slower
// (docs/BENCHMARKS.md). q.mu is held.
func (q *queue) dropTombstones() {
	if len(q.table) == 0 {
		clear(q.table)
	}
}

// takeLocked is take with q.mu held.
func (q *queue) takeLocked(name string) *entry {
	e := q.table[name]
	if e == nil || e.idle {
		return nil
	}
	q.releaseLocked(e)
	return e
}

// releaseLocked takes e, which is in flight, out of it; q.mu is held.
func (q *queue) releaseLocked(e *entry) {
	if e.owned {
		e.idle = true
	} else {
		delete(q.table, e.req.Name)
	}
	q.inflight--
}

// close fails every in-flight entry with err and rejects later adds.
func (q *queue) close(err error) {
	q.mu.Lock()
	q.closed = err
	es := make([]*entry, 0, q.inflight)
	for _, e := range q.table {
		if !e.idle {
			es = append(es, e)
			if e.owned {
				// Out of flight: a group's Close after the failure
				// then succeeds instead of finding its step still on.
				e.idle = true
			}
		}
	}
	q.table = make(map[string]*entry)
	q.inflight = 0
	q.fifo = nil
	q.mu.Unlock()
	for _, e := range es {
		e.h.fail(err)
	}
}
