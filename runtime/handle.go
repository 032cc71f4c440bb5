package runtime

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gohorovod/gohorovod/tensor"
)

// Handle is the future of an asynchronous operation. It completes once, when
// every tensor of the operation is done or on the first error.
type Handle struct {
	done    chan struct{}
	pending atomic.Int32
	once    sync.Once
	q       *queue // set when enqueued: Wait wakes the loop through it

	// Written by the background loop before done is closed.
	outs     []*tensor.Tensor
	splits   []int
	joinRank int
	err      error
}

func newHandle(n int) *Handle {
	h := &Handle{done: make(chan struct{}), outs: make([]*tensor.Tensor, n), joinRank: -1}
	h.pending.Store(int32(n))
	return h
}

// finishOne records that one tensor is done; the last one closes the handle.
func (h *Handle) finishOne() {
	if h.pending.Add(-1) == 0 {
		h.once.Do(func() { close(h.done) })
	}
}

// fail completes the handle with err (the first error wins).
func (h *Handle) fail(err error) {
	h.once.Do(func() {
		h.err = err
		close(h.done)
	})
}

// Done returns a channel that is closed when the operation completes.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Poll reports, without blocking, whether the operation has completed.
func (h *Handle) Poll() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the operation completes or ctx is done, and returns the
// operation's error, or ctx's. Abandoning a wait does not cancel the
// operation: the other ranks are committed to it.
//
// A caller that waits has nothing more to submit for now, so Wait wakes the
// background loop for a cycle at once rather than at the next tick
// (HOROVOD_CYCLE_TIME): the tail of a backward pass is not held back by up
// to a cycle of sleep. While any caller waits and names are still in flight,
// the loop cycles back to back instead of sleeping: a cycle that could
// perform only part of what is awaited (a peer had not submitted the rest
// yet) is followed at once by another, which meets the peer's next cycle
// instead of idling until the tick (the throughput this gains is in
// docs/BENCHMARKS.md).
func (h *Handle) Wait(ctx context.Context) error {
	select {
	case <-h.done:
		return h.err
	default:
	}
	if h.q != nil {
		h.q.waiters.Add(1)
		defer h.q.waiters.Add(-1)
		h.q.signal()
	}
	select {
	case <-h.done:
		return h.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Err returns the operation's error once it has completed (nil before).
func (h *Handle) Err() error {
	if !h.Poll() {
		return nil
	}
	return h.err
}

// Output returns the result tensor of a single-tensor operation (the input
// itself for in-place variants), or nil before completion or after an error.
func (h *Handle) Output() *tensor.Tensor {
	if !h.Poll() || h.err != nil || len(h.outs) == 0 {
		return nil
	}
	return h.outs[0]
}

// Outputs returns the result tensors of a grouped operation, in the order
// given, or nil before completion or after an error.
func (h *Handle) Outputs() []*tensor.Tensor {
	if !h.Poll() || h.err != nil {
		return nil
	}
	return h.outs
}

// ReceivedSplits returns, after an alltoall, the number of rows received
// from each rank.
func (h *Handle) ReceivedSplits() []int {
	if !h.Poll() || h.err != nil {
		return nil
	}
	return h.splits
}

// LastJoinedRank returns, after a Join, the rank that joined last (the same
// on every rank), or -1.
func (h *Handle) LastJoinedRank() int {
	if !h.Poll() || h.err != nil {
		return -1
	}
	return h.joinRank
}
