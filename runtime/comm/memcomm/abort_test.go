package memcomm

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// collectives calls each kind of collective with arguments that are right
// for the group; a blocked call returns when the group is torn down.
var collectives = []struct {
	name string
	call func(c comm.Communicator) error
}{
	{"allreduce", func(c comm.Communicator) error { return c.Allreduce(f32(1, 2), tensor.Sum) }},
	{"large allreduce", func(c comm.Communicator) error {
		return c.Allreduce(tensor.New(tensor.Float32, parallelBytes), tensor.Sum)
	}},
	{"allgatherv", func(c comm.Communicator) error {
		return c.Allgatherv(f32(1), tensor.New(tensor.Float32, c.Size()), ones(c.Size()))
	}},
	{"gatherv", func(c comm.Communicator) error {
		return c.Gatherv(f32(1), tensor.New(tensor.Float32, c.Size()), ones(c.Size()), 0)
	}},
	{"bcast", func(c comm.Communicator) error { return c.Bcast(f32(1, 2, 3), 0) }},
	{"alltoallv", func(c comm.Communicator) error {
		n := c.Size()
		return c.Alltoallv(tensor.New(tensor.Float32, n), ones(n), tensor.New(tensor.Float32, n), ones(n))
	}},
	{"reducescatter", func(c comm.Communicator) error {
		n := c.Size()
		return c.ReduceScatter(tensor.New(tensor.Float32, n), f32(0), ones(n), tensor.Sum)
	}},
	{"barrier", func(c comm.Communicator) error { return c.Barrier() }},
	{"split", func(c comm.Communicator) error { _, err := c.Split(0, 0); return err }},
	{"splitlocal", func(c comm.Communicator) error { _, err := c.SplitLocal(); return err }},
}

func ones(n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

// peerErr checks that err is the *comm.PeerError of an abort by rank with cause.
func peerErr(err error, rank int, cause string) error {
	var pe *comm.PeerError
	if !errors.As(err, &pe) || !errors.Is(err, comm.ErrClosed) {
		return fmt.Errorf("%v, want a *comm.PeerError matching comm.ErrClosed", err)
	}
	if pe.Rank != rank || pe.Cause != cause {
		return fmt.Errorf("%v: rank %d, cause %q; want rank %d, cause %q", err, pe.Rank, pe.Cause, rank, cause)
	}
	return nil
}

// selfErr checks that err is what the aborting rank gets itself: comm.ErrClosed
// and its own cause, no *comm.PeerError.
func selfErr(err, cause error) error {
	var pe *comm.PeerError
	if !errors.Is(err, comm.ErrClosed) || !errors.Is(err, cause) || errors.As(err, &pe) {
		return fmt.Errorf("%v, want an error matching comm.ErrClosed and %q, not a *comm.PeerError", err, cause)
	}
	if !strings.Contains(err.Error(), cause.Error()) {
		return fmt.Errorf("%q does not name the cause %q", err, cause)
	}
	return nil
}

// TestMemoryAbortReleases checks that Abort on one member releases every
// rank blocked in each kind of collective with a *comm.PeerError naming that
// member and its cause, whether the aborting rank stayed out of the
// collective (a failed rank) or is blocked in it too (Abort from another
// goroutine), and that every later call gets the same errors.
func TestMemoryAbortReleases(t *testing.T) {
	cause := errors.New("out of memory on the device")
	for _, n := range []int{2, 3, 4} {
		for _, aborter := range []int{n - 1, 0} {
			for _, tt := range collectives {
				t.Run(fmt.Sprintf("n=%d/aborter=%d/%s", n, aborter, tt.name), func(t *testing.T) {
					// Every rank but the last enters the collective; the
					// last never arrives.
					comms := NewGroup(n)
					errs := make([]error, n-1)
					var wg sync.WaitGroup
					for r := range n - 1 {
						wg.Go(func() { errs[r] = tt.call(comms[r]) })
					}
					waitArrived(comms[0], n-1)
					if err := comms[aborter].(comm.Aborter).Abort(cause); err != nil {
						t.Fatalf("abort: %v", err)
					}
					wg.Wait()
					check := func(when string, r int, err error) {
						t.Helper()
						var bad error
						if r == aborter {
							bad = selfErr(err, cause)
						} else {
							bad = peerErr(err, aborter, cause.Error())
						}
						if bad != nil {
							t.Errorf("rank %d, %s: %v", r, when, bad)
						}
					}
					for r, err := range errs {
						check("blocked", r, err)
					}
					for r, c := range comms {
						check("later", r, tt.call(c))
						check("later barrier", r, c.Barrier())
					}
				})
			}
		}
	}
}

// TestMemoryAbortFirstWins checks that the first Close or Abort of a group
// decides what its ranks see: a later Abort (by another rank or the same
// one), Close or timeout changes nothing.
func TestMemoryAbortFirstWins(t *testing.T) {
	first, second := errors.New("first"), errors.New("second")
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("n=%d/abort-then-abort-and-close", n), func(t *testing.T) {
			comms := NewGroup(n)
			comms[1].(comm.Aborter).Abort(first)
			comms[0].(comm.Aborter).Abort(second)
			comms[1].(comm.Aborter).Abort(second)
			for _, c := range comms {
				if err := c.Close(); err != nil {
					t.Errorf("close rank %d after abort: %v", c.Rank(), err)
				}
			}
			for r, c := range comms {
				var bad error
				if r == 1 {
					bad = selfErr(c.Barrier(), first)
				} else {
					bad = peerErr(c.Barrier(), 1, "first")
				}
				if bad != nil {
					t.Errorf("rank %d: %v", r, bad)
				}
			}
		})
		t.Run(fmt.Sprintf("n=%d/close-then-abort", n), func(t *testing.T) {
			comms := NewGroup(n)
			comms[0].Close()
			comms[n-1].(comm.Aborter).Abort(first)
			for r, c := range comms {
				err := c.Barrier()
				var pe *comm.PeerError
				if err != comm.ErrClosed || errors.As(err, &pe) {
					t.Errorf("rank %d: %v, want plain comm.ErrClosed", r, err)
				}
			}
		})
		t.Run(fmt.Sprintf("n=%d/abort-nil-cause", n), func(t *testing.T) {
			comms := NewGroup(n)
			comms[n-1].(comm.Aborter).Abort(nil)
			for r, c := range comms[:n-1] {
				if bad := peerErr(c.Barrier(), n-1, ""); bad != nil {
					t.Errorf("rank %d: %v", r, bad)
				}
			}
			if err := comms[n-1].Barrier(); !errors.Is(err, comm.ErrClosed) || !strings.Contains(err.Error(), "this rank") {
				t.Errorf("aborting rank: %v, want comm.ErrClosed naming this rank", err)
			}
		})
		t.Run(fmt.Sprintf("n=%d/racing-aborts", n), func(t *testing.T) {
			// Every rank aborts at once: one wins, and every rank agrees
			// on which.
			comms := NewGroup(n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() { c.(comm.Aborter).Abort(fmt.Errorf("cause %d", r)) })
			}
			wg.Wait()
			winner := -1
			for r, c := range comms {
				var pe *comm.PeerError
				if err := c.Barrier(); errors.As(err, &pe) {
					if winner >= 0 && pe.Rank != winner {
						t.Errorf("rank %d names rank %d, another rank named %d", r, pe.Rank, winner)
					}
					winner = pe.Rank
				}
			}
			if winner < 0 {
				t.Fatal("no rank got a *comm.PeerError")
			}
			for r, c := range comms {
				err := c.Barrier()
				var pe *comm.PeerError
				switch {
				case r != winner:
					if bad := peerErr(err, winner, fmt.Sprintf("cause %d", winner)); bad != nil {
						t.Errorf("rank %d: %v", r, bad)
					}
				case !errors.Is(err, comm.ErrClosed) || errors.As(err, &pe) || !strings.Contains(err.Error(), fmt.Sprintf("cause %d", r)):
					t.Errorf("winning rank %d: %v, want comm.ErrClosed naming its own cause", r, err)
				}
			}
		})
	}
	t.Run("timeout-then-abort", func(t *testing.T) {
		comms := NewGroupWith(2, GroupOptions{Timeout: 10 * time.Millisecond})
		if err := comms[0].Barrier(); !errors.Is(err, ErrTimeout) {
			t.Fatalf("barrier: %v, want a timeout", err)
		}
		comms[1].(comm.Aborter).Abort(first)
		for r, c := range comms {
			var pe *comm.PeerError
			if err := c.Barrier(); !errors.Is(err, ErrTimeout) || errors.As(err, &pe) {
				t.Errorf("rank %d: %v, want the timeout", r, err)
			}
		}
	})
}

// TestMemoryAbortSubgroups checks that aborting a group made by Split
// leaves its parent working, and that Done tells when a group is torn down.
func TestMemoryAbortSubgroups(t *testing.T) {
	const n = 3
	comms := NewGroup(n)
	errs := onRanks(comms, func(c comm.Communicator) error {
		sub, err := c.Split(0, c.Rank())
		if err != nil {
			return err
		}
		done := sub.(interface{ Done() <-chan struct{} }).Done()
		var bad error
		select {
		case <-done:
			bad = errors.New("Done closed before the abort")
		default:
		}
		if err := c.Barrier(); err != nil { // no abort before every rank looked
			return err
		}
		if c.Rank() == 2 {
			sub.(comm.Aborter).Abort(errors.New("bad batch"))
		}
		err = sub.Barrier()
		if c.Rank() != 2 && bad == nil {
			bad = peerErr(err, 2, "bad batch")
		}
		<-done
		return errors.Join(bad, sumCheck(c))
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
