package embedded

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/tensor"
)

// splitTwice returns, for each rank of a new n-rank group, two more
// communicators over the same ranks (and so the same connections).
func splitTwice(t *testing.T, n int, o GroupOptions) (a, b []*Comm) {
	t.Helper()
	world := localGroup(t, n, o)
	a, b = make([]*Comm, n), make([]*Comm, n)
	errs := commtest.OnRanks(world, func(c *Comm) error {
		ca, err := c.Split(0, c.Rank())
		if err != nil {
			return err
		}
		cb, err := c.Split(0, c.Rank())
		if err != nil {
			return err
		}
		a[c.Rank()], b[c.Rank()] = ca.(*Comm), cb.(*Comm)
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for r := range n {
			a[r].Close()
			b[r].Close()
		}
	})
	return a, b
}

// within runs f on every rank at once and fails the test if they have not
// all returned after d: a deadlock. The groups are then closed (by the
// cleanups), which ends the waits.
func within(t *testing.T, d time.Duration, ranks []*Comm, f func(c *Comm) error) {
	t.Helper()
	done := make(chan []error, 1)
	go func() { done <- commtest.OnRanks(ranks, f) }()
	select {
	case errs := <-done:
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		t.Fatalf("the ranks had not finished after %v: a deadlock", d)
	}
}

// TestCommunicatorsDoNotBlockEachOther: two communicators share the
// connections, rank 0 broadcasts on A then on B, and rank 1 takes part in
// B before A. Rank 1's reader meets A's frame first, with no receive posted
// for it; were it to wait for that receive, B's frame behind it would never
// be read and both ranks would wait for ever (what hung the runtime's
// background loop against a collective on the world communicator). Small
// frames and large ones (which wait a little for their receive first), on
// TCP and on Unix sockets with shared memory.
func TestCommunicatorsDoNotBlockEachOther(t *testing.T) {
	for _, unix := range []bool{false, true} {
		// float32s: a small frame, and large ones (over earlyCopyMax)
		for _, n := range []int{3, 2000, 1 << 20} {
			t.Run(fmt.Sprintf("unix=%v/n=%d", unix, n), func(t *testing.T) {
				a, b := splitTwice(t, 2, GroupOptions{Unix: unix})
				for r := range 2 {
					// Without the agreement check a collective is only its
					// data frames, so the order on the wire is the calls'.
					a[r].SetCheck(false)
					b[r].SetCheck(false)
				}
				fill := func(x *tensor.Tensor, v float32) {
					for i := range x.Float32s() {
						x.Float32s()[i] = v + float32(i%7)
					}
				}
				within(t, 20*time.Second, a, func(ca *Comm) error {
					r := ca.Rank()
					cb := b[r]
					xa, xb := tensor.New(tensor.Float32, n), tensor.New(tensor.Float32, n)
					if r == 0 {
						fill(xa, 10)
						fill(xb, 20)
						if err := ca.Bcast(xa, 0); err != nil {
							return err
						}
						return cb.Bcast(xb, 0)
					}
					if err := cb.Bcast(xb, 0); err != nil {
						return err
					}
					if err := ca.Bcast(xa, 0); err != nil {
						return err
					}
					for i := range n {
						if xa.Float32s()[i] != 10+float32(i%7) || xb.Float32s()[i] != 20+float32(i%7) {
							return fmt.Errorf("element %d: A %v, B %v", i, xa.Float32s()[i], xb.Float32s()[i])
						}
					}
					return nil
				})
			})
		}
	}
}

// TestLateReceiverGetsEarlyFrames: one rank enters an allreduce well after
// the others, so their frames arrive before its receives and are kept
// aside (after the grace, for large ones); the result is still exact,
// including the pieces that shared memory would have reduced in place.
func TestLateReceiverGetsEarlyFrames(t *testing.T) {
	for _, unix := range []bool{false, true} {
		for _, n := range []int{5, 3 << 18} {
			t.Run(fmt.Sprintf("unix=%v/n=%d", unix, n), func(t *testing.T) {
				const size = 3
				cs := localGroup(t, size, GroupOptions{Unix: unix})
				within(t, 20*time.Second, cs, func(c *Comm) error {
					x := tensor.New(tensor.Int32, n)
					for i := range x.Int32s() {
						x.Int32s()[i] = int32(c.Rank()*1000 + i%13)
					}
					if c.Rank() == size-1 {
						time.Sleep(50 * time.Millisecond)
					}
					for range 3 {
						if err := c.Allreduce(x, tensor.Sum); err != nil {
							return err
						}
					}
					for i, v := range x.Int32s() {
						// Each round sums the ranks' values: 3 rounds
						// multiply by 3 twice after the first sum.
						want := int32(9 * (3000 + 3*(i%13)))
						if v != want {
							return fmt.Errorf("element %d: %d, want %d", i, v, want)
						}
					}
					return nil
				})
			})
		}
	}
}
