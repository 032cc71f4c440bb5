package optim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gohorovod/gohorovod/tensor"
)

// CommHook communicates the gradients of the DistributedOptimizer, one
// bucket at a time (PyTorch DDP's communication hook). The optimizer calls
// Start for a bucket as soon as its last gradient is Ready (or at
// Synchronize for the buckets not started by then), waits for every
// bucket's Waiter, and once all of them have succeeded calls Finish for
// each bucket, in bucket order, before the wrapped optimizer steps. Finish
// leaves in the bucket's gradients what the wrapped optimizer should apply:
// with Average, the mean over ranks, or an approximation of it.
//
// # Writing a hook
//
// Start may run several collectives, one after another, each depending on
// the last (PowerSGD allreduces P, orthogonalises it, then allreduces Q):
// do that in a goroutine and return Async's Waiter, which reports the
// goroutine's error. The rules that keep every rank in step and the
// optimizer's cancellation safe:
//
//   - every rank must start the same collectives, under the same names, in
//     a sequence that depends only on what every rank knows (the bucket,
//     the step, the hook's options and shared state), never on local
//     values;
//   - a name may be reused from step to step (keep names stable per
//     bucket: the runtime's response cache then skips negotiation) but
//     must not be in flight twice at once: derive names from
//     Bucket.Name;
//   - the Waiter follows Waiter's contract: Wait(ctx) returning ctx's
//     error only abandons the wait, the work goes on, and Wait may be
//     called again (Synchronize after a cancelled Synchronize does that,
//     and never calls Start twice for a bucket in one step); any other
//     return means the work is over, goroutine included;
//   - Start may write into the gradients (Bucket.Grads) and the hook's own
//     buffers, but keep the hook's persistent state (what State returns)
//     unchanged until Finish, so that a failed step leaves it as it was;
//   - Start and the goroutines it starts may run while backward computes
//     other gradients, and Starts of different buckets may run at once:
//     touch only this bucket's tensors and guard shared state.
//
// A hook that keeps state from step to step (PowerSGD's error feedback
// and warm start) implements StatefulHook, so that its state travels with
// the optimizer's in State, SetState and BroadcastState.
//
// The built-in hooks: AllreduceHook (the default), CompressionHook (FP16,
// BF16) and PowerSGD. The optimizer recognises the first two and runs
// them on its own fastest path (held reduce groups over the flat gradient
// buffer, see the DistributedOptimizer), so that passing them changes
// nothing; their Start and Finish also work on their own, for hooks that
// wrap them. A user hook's buckets are the Groups given, else runs of
// consecutive gradients in backward order up to BucketBytes; the
// gradients stay in their own storage (no flat buffer, no held groups).
type CommHook interface {
	// Start starts communicating b's gradients with c and returns the
	// handle of all that it started. On an error, anything it started
	// must have completed or be covered by the returned Waiter (return
	// it with the error, or nil if nothing is in flight).
	Start(c Collectives, b *Bucket) (Waiter, error)
	// Finish decodes what Start's collectives produced into b's
	// gradients, once every bucket of the step has completed without
	// error. It runs in Synchronize's goroutine.
	Finish(b *Bucket) error
}

// Bucket is one unit of gradients that a CommHook communicates. The
// optimizer makes a bucket's Index, Name, Params and Grads once; Step and
// the reduction's arguments are set before each Start, and the same
// *Bucket is passed to Start and Finish of a step.
type Bucket struct {
	// Index is the bucket's position, from 0, stable for the
	// optimizer's life.
	Index int
	// Name is stable and the same on every rank: the first parameter's
	// name, prefixed by "group." for a bucket of several parameters.
	// Derive the names of the bucket's collectives from it.
	Name string
	// Params are the bucket's parameters, in backward order (Grads[k]
	// is Params[k].Grad).
	Params []Param
	Grads  []*tensor.Tensor
	// Step counts the steps this optimizer has finished without error
	// before this one (restored by SetState when the hook is a
	// StatefulHook).
	Step int
	// Op, Prescale and Postscale are the reduction the optimizer was
	// asked for (WithOp, GradientPredivideFactor): pass them to
	// AllreduceAsync for plain averaging.
	Op                  tensor.ReduceOp
	Prescale, Postscale float64
}

// StatefulHook is a CommHook with state that must survive checkpoints:
// the DistributedOptimizer's State includes it, SetState restores it, and
// so BroadcastState carries it. Its scalars and the slots of its tensors
// (State.Tensors keys SlotKey(param, slot)) start with StatePrefix, which
// must not be the prefix of any key of the wrapped optimizer's state; the
// optimizer adds the scalar StatePrefix()+"step" (Bucket.Step).
type StatefulHook interface {
	CommHook
	// StatePrefix is the prefix of the hook's keys, e.g. "powersgd.".
	StatePrefix() string
	// HookState returns a deep copy of the hook's state (Kind unused).
	HookState() *State
	// SetHookState replaces the hook's state by a copy of s, holding
	// only the hook's keys (without the step).
	SetHookState(s *State) error
}

// WithCommHook sets the hook through which every bucket of gradients is
// communicated (default AllreduceHook). WithCommHook(CompressionHook(FP16))
// is WithCompression(FP16); of the two options, the last given wins.
func WithCommHook(h CommHook) DistOption {
	return func(c *distConfig) {
		c.hook, c.comp = nil, NoCompression
		switch h := h.(type) {
		case nil, allreduceHook:
		case *compressionHook:
			c.comp = h.comp
		default:
			c.hook = h
		}
	}
}

// AllreduceHook returns the default hook: every gradient allreduced with
// the optimizer's op, as it is.
func AllreduceHook() CommHook { return allreduceHook{} }

type allreduceHook struct{}

// Start allreduces b's gradients in place: as one grouped allreduce when c
// is a GroupCollectives and the bucket has several, else one by one.
func (allreduceHook) Start(c Collectives, b *Bucket) (Waiter, error) {
	return allreduceAll(c, b.Grads, b.Name, b.Op, b.Prescale, b.Postscale)
}

// Finish does nothing: the gradients were reduced in place.
func (allreduceHook) Finish(*Bucket) error { return nil }

// allreduceAll allreduces ts in place under name (one tensor) or as a
// group (several), or one by one under name+"/"+k on a Collectives
// without grouped allreduce.
func allreduceAll(c Collectives, ts []*tensor.Tensor, name string, op tensor.ReduceOp, pre, post float64) (Waiter, error) {
	if len(ts) == 1 {
		return c.AllreduceAsync(ts[0], name, op, pre, post)
	}
	if gc, ok := c.(GroupCollectives); ok {
		return gc.GroupedAllreduceAsync(ts, name, op, pre, post)
	}
	ws := make(waiters, 0, len(ts))
	for k, t := range ts {
		w, err := c.AllreduceAsync(t, fmt.Sprintf("%s/%d", name, k), op, pre, post)
		if err != nil {
			if len(ws) == 0 {
				return nil, err
			}
			return ws, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

// waiters waits for each of several Waiters, returning the first error;
// abandoned on ctx, it starts again from the first not yet complete.
type waiters []Waiter

func (ws waiters) Wait(ctx context.Context) error {
	var first error
	for _, w := range ws {
		if err := w.Wait(ctx); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return err
			}
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// CompressionHook returns the hook that casts each gradient to c's half
// type (FP16 or BF16), allreduces that and casts back: what
// WithCompression(c) does, which the optimizer runs on its own path.
// NoCompression gives AllreduceHook.
func CompressionHook(c Compression) CommHook {
	if c == NoCompression {
		return allreduceHook{}
	}
	return &compressionHook{comp: c, wire: map[int][]*tensor.Tensor{}}
}

type compressionHook struct {
	comp Compression
	mu   sync.Mutex
	wire map[int][]*tensor.Tensor // per bucket index, the half-precision copies
}

// Start casts b's gradients into half-precision copies and allreduces
// them.
func (h *compressionHook) Start(c Collectives, b *Bucket) (Waiter, error) {
	if h.comp > BF16 {
		return nil, fmt.Errorf("optim: unsupported compression %v", h.comp)
	}
	h.mu.Lock()
	ws := h.wire[b.Index]
	if ws == nil {
		ws = make([]*tensor.Tensor, len(b.Grads))
		for k, g := range b.Grads {
			ws[k] = tensor.New(h.comp.dtype(g.DType()), g.Shape()...)
		}
		h.wire[b.Index] = ws
	}
	h.mu.Unlock()
	for k, g := range b.Grads {
		compress(ws[k], g)
	}
	return allreduceAll(c, ws, b.Name, b.Op, b.Prescale, b.Postscale)
}

// Finish casts the reduced copies back into the gradients.
func (h *compressionHook) Finish(b *Bucket) error {
	h.mu.Lock()
	ws := h.wire[b.Index]
	h.mu.Unlock()
	for k, g := range b.Grads {
		decompress(g, ws[k])
	}
	return nil
}

// Async runs f in a new goroutine and returns its Waiter, which completes
// with f's error once f returns: the way for a CommHook's Start to run
// dependent collectives (f starts one, waits for it with
// context.Background(), computes, starts the next). f must return once
// its collectives have completed or failed; it owns nothing else.
func Async(f func() error) Waiter {
	w := &asyncWaiter{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = f()
	}()
	return w
}

type asyncWaiter struct {
	done chan struct{}
	err  error
}

func (w *asyncWaiter) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		select {
		case <-w.done:
			return w.err
		default:
		}
		return ctx.Err()
	}
}

// hookState splits s into the wrapped optimizer's state and the hook's
// (the keys starting with prefix); s is not modified.
func hookState(s *State, prefix string) (inner, hook *State) {
	inner = &State{Kind: s.Kind, Scalars: map[string]float64{}, Tensors: map[string]*tensor.Tensor{}}
	hook = &State{Scalars: map[string]float64{}, Tensors: map[string]*tensor.Tensor{}}
	for k, v := range s.Scalars {
		if strings.HasPrefix(k, prefix) {
			hook.Scalars[k] = v
		} else {
			inner.Scalars[k] = v
		}
	}
	for k, t := range s.Tensors {
		slot := k
		if i := strings.LastIndexByte(k, '/'); i >= 0 {
			slot = k[i+1:]
		}
		if strings.HasPrefix(slot, prefix) {
			hook.Tensors[k] = t
		} else {
			inner.Tensors[k] = t
		}
	}
	return inner, hook
}

// makeBuckets makes the Bucket of every unit for the hook, its members
// in backward order.
func (d *DistributedOptimizer) makeBuckets(params []Param, ord []int) {
	pos := make([]int, len(params))
	for k, i := range ord {
		pos[i] = k
	}
	d.hbuckets = make([]*Bucket, len(d.units))
	for u, members := range d.units {
		slices.SortFunc(members, func(a, b int) int { return pos[a] - pos[b] })
		b := &Bucket{Index: u, Name: d.unitName(u)}
		for _, i := range members {
			b.Params = append(b.Params, params[i])
			b.Grads = append(b.Grads, params[i].Grad)
		}
		d.hbuckets[u] = b
	}
}
