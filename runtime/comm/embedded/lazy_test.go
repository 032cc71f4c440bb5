package embedded

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/tensor"
)

func connections(cs []*Comm) []int {
	out := make([]int, len(cs))
	for r, c := range cs {
		out[r] = c.Connections()
	}
	return out
}

// TestConnectionsOnDemand: a rank connects to the peers its collectives
// use, not to every rank: after New (whose barrier meets the partners at
// distances 1, 2, 4, ...) and a small allreduce (recursive doubling, with
// the agreement check off as the runtime runs it), a
// rank of 16 holds at most a small multiple of log2(16) connections; an
// alltoall then connects every pair, since it needs them all.
func TestConnectionsOnDemand(t *testing.T) {
	if testing.Short() {
		t.Skip("sets up 16 ranks over sockets")
	}
	leakCheck(t)
	const n = 16
	cs := localGroup(t, n, GroupOptions{Unix: true})
	limit := 2 * ceilLog2(n)
	for r, k := range connections(cs) {
		if k > limit {
			t.Errorf("rank %d: %d connections after New, want at most %d", r, k, limit)
		}
	}
	errs := commtest.OnRanks(cs, func(c *Comm) error {
		c.SetCheck(false) // as the runtime runs it
		return c.Allreduce(tensor.New(tensor.Float32, 256), tensor.Sum)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	limit = 3 * ceilLog2(n)
	for r, k := range connections(cs) {
		if k > limit {
			t.Errorf("rank %d: %d connections after a small allreduce, want at most %d", r, k, limit)
		}
	}
	errs = commtest.OnRanks(cs, func(c *Comm) error {
		counts := make([]int, n)
		for i := range counts {
			counts[i] = 2
		}
		return c.Alltoallv(tensor.New(tensor.Float32, 2*n), counts, tensor.New(tensor.Float32, 2*n), counts)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, k := range connections(cs) {
		if k != n-1 {
			t.Errorf("rank %d: %d connections after an alltoall, want %d", r, k, n-1)
		}
	}
}

// TestOneConnectionPerPair: two ranks that need each other at once both
// dial; both sides keep the same one connection (the higher rank's), over
// TCP and Unix sockets, group after group.
func TestOneConnectionPerPair(t *testing.T) {
	leakCheck(t)
	for i := range 20 {
		cs := localGroup(t, 2, GroupOptions{Unix: i%2 == 1})
		a, b := cs[0].m.conns[1], cs[1].m.conns[0]
		if !a.connected() || !b.connected() {
			t.Fatalf("round %d: connected %v and %v after New", i, a.connected(), b.connected())
		}
		if i%2 == 0 && a.nc.LocalAddr().String() != b.nc.RemoteAddr().String() {
			t.Fatalf("round %d: rank 0 uses %v, rank 1 talks to %v: two connections", i, a.nc.LocalAddr(), b.nc.RemoteAddr())
		}
		errs := commtest.OnRanks(cs, func(c *Comm) error {
			v := tensor.FromFloat32([]float32{float32(c.Rank() + 1)})
			if err := c.Allreduce(v, tensor.Sum); err != nil {
				return err
			}
			if got := v.Float32s()[0]; got != 3 {
				return fmt.Errorf("got %v, want 3", got)
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d rank %d: %v", i, r, err)
			}
		}
		for _, c := range cs {
			c.Close()
		}
	}
}

// TestFailureReachesUnconnectedRanks: a rank dies; ranks that were never
// connected to it learn of it from the ranks that were (each forwards the
// failure once), so that every rank's next collective fails naming it,
// and none waits for ever.
func TestFailureReachesUnconnectedRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("sets up 8 ranks over sockets")
	}
	leakCheck(t)
	const n, victim = 8, 7
	cs := localGroup(t, n, GroupOptions{})
	var strangers []int
	for r := range n - 1 {
		if !cs[r].m.conns[victim].connected() {
			strangers = append(strangers, r)
		}
	}
	if len(strangers) == 0 {
		t.Fatalf("every rank is connected to rank %d: nothing to test", victim)
	}
	crash(cs[victim])
	errs := commtest.OnRanks(cs[:victim], func(c *Comm) error {
		done := make(chan error, 1)
		go func() { done <- c.Allreduce(tensor.New(tensor.Float32, 64), tensor.Sum) }()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			return errors.New("still waiting after 20 s")
		}
	})
	for r, err := range errs {
		wantPeerError(t, fmt.Sprintf("rank %d (strangers %v)", r, strangers), err, victim, "rank 7")
	}
}

// TestAbortReachesUnconnectedRanks: a rank aborts the group; the ranks it
// never talked to hear its rank and cause too.
func TestAbortReachesUnconnectedRanks(t *testing.T) {
	if testing.Short() {
		t.Skip("sets up 8 ranks over sockets")
	}
	leakCheck(t)
	const n = 8
	cs := localGroup(t, n, GroupOptions{Unix: true})
	cause := errors.New("the loss is NaN")
	errs := commtest.OnRanks(cs, func(c *Comm) error {
		if c.Rank() == 0 {
			time.Sleep(20 * time.Millisecond)
			c.Abort(cause)
			return nil
		}
		return c.Barrier()
	})
	for r := 1; r < n; r++ {
		wantPeerError(t, fmt.Sprintf("rank %d's barrier", r), errs[r], 0, cause.Error())
	}
}
