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
	req      wire.Request
	in, out  *tensor.Tensor
	splits   []int // alltoall: rows to send to each rank, or nil
	h        *Handle
	idx      int // index of this tensor in h.outs
	enqueued time.Time
}

// queue is the tensor queue: the table of in-flight names and the FIFO of
// requests the loop has not yet taken.
type queue struct {
	mu     sync.Mutex
	table  map[string]*entry
	fifo   []*entry
	closed error // non-nil once the loop has stopped
	// wake tells the loop to start a cycle now: a group of requests was
	// enqueued, or a caller waits on a handle.
	wake chan struct{}
	// waiters counts callers blocked in Handle.Wait.
	waiters atomic.Int32
}

func (q *queue) reset() {
	q.mu.Lock()
	q.table = make(map[string]*entry)
	q.fifo = nil
	q.closed = nil
	q.wake = make(chan struct{}, 1)
	q.mu.Unlock()
}

// add inserts entries atomically: all names must be free (and distinct).
func (q *queue) add(es ...*entry) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed != nil {
		return q.closed
	}
	for i, e := range es {
		if _, ok := q.table[e.req.Name]; ok {
			for _, f := range es[:i] {
				delete(q.table, f.req.Name)
			}
			return ErrDuplicateName
		}
		q.table[e.req.Name] = e
		if e.h != nil {
			e.h.q = q
		}
	}
	q.fifo = append(q.fifo, es...)
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
	n := len(q.table)
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

// take removes name from the table and returns its entry (nil if absent).
func (q *queue) take(name string) *entry {
	q.mu.Lock()
	e := q.table[name]
	delete(q.table, name)
	q.mu.Unlock()
	return e
}

// close fails every in-flight entry with err and rejects later adds.
func (q *queue) close(err error) {
	q.mu.Lock()
	q.closed = err
	es := make([]*entry, 0, len(q.table))
	for _, e := range q.table {
		es = append(es, e)
	}
	q.table = make(map[string]*entry)
	q.fifo = nil
	q.mu.Unlock()
	for _, e := range es {
		e.h.fail(err)
	}
}
