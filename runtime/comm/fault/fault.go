package fault

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// Kind names a collective method of comm.Communicator.
type Kind string

// The kinds of collective, one per method of comm.Communicator. A Rule with
// the empty Kind matches every one of them.
const (
	Allreduce     Kind = "allreduce"
	Allgatherv    Kind = "allgatherv"
	Gatherv       Kind = "gatherv"
	Bcast         Kind = "bcast"
	Alltoallv     Kind = "alltoallv"
	ReduceScatter Kind = "reducescatter"
	Barrier       Kind = "barrier"
	Split         Kind = "split"
	SplitLocal    Kind = "splitlocal"
	// Exchange is comm.Exchange (the wrapper is a comm.Exchanger): its
	// calls count as exchanges, not as the Alltoallv that may carry them.
	Exchange Kind = "exchange"
)

// Kinds returns every Kind, in the order of comm.Communicator's methods,
// then Exchange.
func Kinds() []Kind {
	return []Kind{Allreduce, Allgatherv, Gatherv, Bcast, Alltoallv, ReduceScatter, Barrier, Split, SplitLocal, Exchange}
}

// Rule says which calls of a wrapped communicator fault, and how.
type Rule struct {
	// Kind is the method the rule applies to; "" matches every collective.
	Kind Kind
	// Call is the 1-based number of the matching call that faults,
	// counting only calls of Kind on this member (every collective for
	// Kind ""); 0 means every matching call from the first.
	Call int
	// Err is the error the faulting call returns; nil means a *Error
	// naming the call's kind and its number among the calls of that kind.
	Err error
	// Block makes the call wait, instead of failing, until Release is
	// called, this wrapper is closed or aborted, or the inner group is torn
	// down (where the inner communicator reports it, through a method
	// Done() <-chan struct{}, as the in-memory group does); the call then
	// goes on into the inner communicator and returns what it returns: the
	// collective's result after Release (a late rank), the group's error
	// after a teardown. Err, Abort and Panic are ignored with Block.
	Block bool
	// Abort makes the faulting call, before it returns Err, abort the
	// inner communicator with Err if the inner is a comm.Aborter, so that
	// the other ranks' blocked and later calls return a *comm.PeerError
	// naming this rank. Inner communicators that cannot abort are left
	// alone.
	Abort bool
	// Panic makes the faulting call panic with Err (or the default *Error)
	// instead of returning it, after the abort if Abort is set.
	Panic bool
}

// Error is the error a faulting call returns when its Rule has no Err.
type Error struct {
	Kind Kind // the method that faulted
	Call int  // its 1-based number among this member's calls of Kind
}

// Error names the kind and the number of the call.
func (e *Error) Error() string {
	return fmt.Sprintf("fault: injected failure of %s call %d", e.Kind, e.Call)
}

// Comm is a comm.Communicator that applies rules to the calls it passes to
// an inner communicator (see Wrap). Like the inner one, its collectives are
// made by one goroutine at a time; Calls, Release, Close and Abort may be
// called from any goroutine.
type Comm struct {
	inner comm.Communicator
	rules []Rule

	mu    sync.Mutex
	calls map[Kind]int
	total int

	release     chan struct{} // closed by Release
	releaseOnce sync.Once
	closed      chan struct{} // closed by Close and Abort
	closeOnce   sync.Once
}

// Wrap returns a communicator that passes every call to inner except those
// that a rule picks; for each collective call the first matching rule, in
// the order given, decides. Calls that no rule picks behave exactly like
// inner's. Split and SplitLocal return inner's result as is: the groups they
// make are not wrapped.
//
// *Comm always has the methods of the optional interfaces a transport may
// offer, and forwards them: comm.Aborter (Abort aborts inner, or closes it
// if inner cannot abort), comm.AgreementChecker (SetCheck and Check; without
// one in inner, the check is off and SetCheck does nothing), the runtime's
// AcceptsDeviceMemory (false unless inner says true) and Done.
//
// Wrap panics if a rule names an unknown Kind or a negative Call.
func Wrap(inner comm.Communicator, rules ...Rule) *Comm {
	for i, r := range rules {
		if r.Kind != "" && !slices.Contains(Kinds(), r.Kind) {
			panic(fmt.Sprintf("fault: rule %d: unknown kind %q", i, r.Kind))
		}
		if r.Call < 0 {
			panic(fmt.Sprintf("fault: rule %d: negative call number %d", i, r.Call))
		}
	}
	return &Comm{
		inner:   inner,
		rules:   slices.Clone(rules),
		calls:   make(map[Kind]int),
		release: make(chan struct{}),
		closed:  make(chan struct{}),
	}
}

// Calls returns the number of calls of kind k made so far, faulted ones
// included; Calls("") counts every collective call.
func (c *Comm) Calls(k Kind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k == "" {
		return c.total
	}
	return c.calls[k]
}

// Release lets every call blocked by a Block rule go on into the inner
// communicator; later calls that a Block rule picks no longer wait.
func (c *Comm) Release() {
	c.releaseOnce.Do(func() { close(c.release) })
}

// inject counts a call of kind k and applies the first rule that picks it:
// it returns the error the call must return without entering inner, or nil
// when the call goes on into inner (after waiting, for a Block rule).
func (c *Comm) inject(k Kind) error {
	c.mu.Lock()
	c.calls[k]++
	c.total++
	n, total := c.calls[k], c.total
	var rule *Rule
	for i := range c.rules {
		r := &c.rules[i]
		nth := n
		switch r.Kind {
		case "":
			nth = total
		case k:
		default:
			continue
		}
		if r.Call == 0 || r.Call == nth {
			rule = r
			break
		}
	}
	c.mu.Unlock()
	if rule == nil {
		return nil
	}
	if rule.Block {
		select {
		case <-c.release:
		case <-c.closed:
		case <-c.Done():
		}
		return nil
	}
	err := rule.Err
	if err == nil {
		err = &Error{Kind: k, Call: n}
	}
	if a, ok := c.inner.(comm.Aborter); ok && rule.Abort {
		a.Abort(err)
	}
	if rule.Panic {
		panic(err)
	}
	return err
}

// Rank returns inner's rank.
func (c *Comm) Rank() int { return c.inner.Rank() }

// Size returns inner's size.
func (c *Comm) Size() int { return c.inner.Size() }

// Allreduce applies the rules, then calls inner's Allreduce.
func (c *Comm) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	if err := c.inject(Allreduce); err != nil {
		return err
	}
	return c.inner.Allreduce(buf, op)
}

// Allgatherv applies the rules, then calls inner's Allgatherv.
func (c *Comm) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	if err := c.inject(Allgatherv); err != nil {
		return err
	}
	return c.inner.Allgatherv(send, recv, counts)
}

// Gatherv applies the rules, then calls inner's Gatherv.
func (c *Comm) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	if err := c.inject(Gatherv); err != nil {
		return err
	}
	return c.inner.Gatherv(send, recv, counts, root)
}

// Bcast applies the rules, then calls inner's Bcast.
func (c *Comm) Bcast(buf *tensor.Tensor, root int) error {
	if err := c.inject(Bcast); err != nil {
		return err
	}
	return c.inner.Bcast(buf, root)
}

// Alltoallv applies the rules, then calls inner's Alltoallv.
func (c *Comm) Alltoallv(send *tensor.Tensor, sendCounts []int, recv *tensor.Tensor, recvCounts []int) error {
	if err := c.inject(Alltoallv); err != nil {
		return err
	}
	return c.inner.Alltoallv(send, sendCounts, recv, recvCounts)
}

// ReduceScatter applies the rules, then calls inner's ReduceScatter.
func (c *Comm) ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error {
	if err := c.inject(ReduceScatter); err != nil {
		return err
	}
	return c.inner.ReduceScatter(send, recv, counts, op)
}

// Exchange applies the rules, then makes the exchange on inner
// (comm.Exchange: inner's own Exchanger, or inner's Alltoallv).
func (c *Comm) Exchange(send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error {
	if err := c.inject(Exchange); err != nil {
		return err
	}
	return comm.Exchange(c.inner, send, dest, recv, source)
}

// Barrier applies the rules, then calls inner's Barrier.
func (c *Comm) Barrier() error {
	if err := c.inject(Barrier); err != nil {
		return err
	}
	return c.inner.Barrier()
}

// Split applies the rules, then returns inner's Split, not wrapped.
func (c *Comm) Split(color, key int) (comm.Communicator, error) {
	if err := c.inject(Split); err != nil {
		return nil, err
	}
	return c.inner.Split(color, key)
}

// SplitLocal applies the rules, then returns inner's SplitLocal, not
// wrapped.
func (c *Comm) SplitLocal() (comm.Communicator, error) {
	if err := c.inject(SplitLocal); err != nil {
		return nil, err
	}
	return c.inner.SplitLocal()
}

// Close releases calls blocked by a Block rule and closes inner. It is not
// counted as a call and no rule applies to it.
func (c *Comm) Close() error {
	// Inner first: a released call must find the group closed.
	err := c.inner.Close()
	c.closeOnce.Do(func() { close(c.closed) })
	return err
}

// Abort releases calls blocked by a Block rule and aborts inner with cause
// (see comm.Aborter), or closes it if inner is not a comm.Aborter. No rule
// applies to it.
func (c *Comm) Abort(cause error) error {
	var err error
	if a, ok := c.inner.(comm.Aborter); ok {
		err = a.Abort(cause)
	} else {
		err = c.inner.Close()
	}
	c.closeOnce.Do(func() { close(c.closed) })
	return err
}

// SetCheck forwards to inner's SetCheck if inner is a comm.AgreementChecker.
func (c *Comm) SetCheck(on bool) {
	if a, ok := c.inner.(comm.AgreementChecker); ok {
		a.SetCheck(on)
	}
}

// Check returns inner's Check if inner is a comm.AgreementChecker, and false
// otherwise.
func (c *Comm) Check() bool {
	if a, ok := c.inner.(comm.AgreementChecker); ok {
		return a.Check()
	}
	return false
}

// AcceptsDeviceMemory returns inner's AcceptsDeviceMemory (the runtime's
// DeviceMemoryCommunicator), and false if inner has no such method.
func (c *Comm) AcceptsDeviceMemory() bool {
	if d, ok := c.inner.(interface{ AcceptsDeviceMemory() bool }); ok {
		return d.AcceptsDeviceMemory()
	}
	return false
}

// Done returns inner's Done channel, closed when inner's group is torn down,
// if inner has one (the in-memory group does), and otherwise a channel
// closed when this wrapper is closed or aborted.
func (c *Comm) Done() <-chan struct{} {
	if d, ok := c.inner.(interface{ Done() <-chan struct{} }); ok {
		return d.Done()
	}
	return c.closed
}

var (
	_ comm.Communicator     = (*Comm)(nil)
	_ comm.Aborter          = (*Comm)(nil)
	_ comm.Exchanger        = (*Comm)(nil)
	_ comm.AgreementChecker = (*Comm)(nil)
)
