package embedded

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/tensor"
)

// oddSizes are the group sizes the algorithms are checked at: powers of
// two, one past them, one short of them, and in between.
var oddSizes = []int{1, 2, 3, 5, 6, 7, 9, 13}

// TestConformanceOddSizes runs the conformance suite at sizes other than
// TestConformance's, where Bruck's runs wrap, the binomial trees are
// ragged and recursive doubling folds ranks in.
func TestConformanceOddSizes(t *testing.T) {
	for _, n := range oddSizes {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			leakCheck(t)
			cs := localGroup(t, n, GroupOptions{Unix: n%2 == 1})
			group := make([]comm.Communicator, n)
			for r, c := range cs {
				group[r] = c
			}
			commtest.RunGroup(t, group)
		})
	}
}

// countPatterns are the per-rank counts the v-collectives are checked
// with: uneven, with empty blocks, all empty, one rank only.
var countPatterns = map[string]func(r, n int) int{
	"ragged":    func(r, n int) int { return r + 1 },
	"zeros":     func(r, n int) int { return (r % 3) * (r + 2) % 5 },
	"all-empty": func(r, n int) int { return 0 },
	"last-only": func(r, n int) int { return map[bool]int{true: 7}[r == n-1] },
	"first-big": func(r, n int) int { return map[bool]int{true: 5000, false: 1}[r == 0] },
}

// counts returns pattern f's counts at n ranks.
func counts(f func(r, n int) int, n int) []int {
	cs := make([]int, n)
	for r := range cs {
		cs[r] = f(r, n)
	}
	return cs
}

// value is element i of rank r's block.
func value(r, i int) int32 { return int32(r<<20 | i) }

// block returns rank r's block of k elements.
func block(r, k int) *tensor.Tensor {
	v := make([]int32, k)
	for i := range v {
		v[i] = value(r, i)
	}
	return tensor.FromInt32(v)
}

// checkGathered reports the first element of got (with one sentinel past
// the blocks) that is not the blocks of cs in rank order.
func checkGathered(got []int32, cs []int) error {
	at := 0
	for q, k := range cs {
		for i := range k {
			if got[at] != value(q, i) {
				return fmt.Errorf("element %d is %#x, want %#x (rank %d's element %d)", at, got[at], value(q, i), q, i)
			}
			at++
		}
	}
	if got[at] != -1 {
		return fmt.Errorf("the sentinel past the blocks is %#x", got[at])
	}
	return nil
}

// sentinel returns k elements of -1.
func sentinel(k int) *tensor.Tensor {
	v := make([]int32, k)
	for i := range v {
		v[i] = -1
	}
	return tensor.FromInt32(v)
}

// TestAllgathervAlgorithms checks every allgather algorithm, forced, at
// the odd sizes with uneven and empty counts.
func TestAllgathervAlgorithms(t *testing.T) {
	for _, n := range oddSizes {
		cs := localGroup(t, n, GroupOptions{Unix: true})
		for _, algo := range []Algorithm{Auto, Direct, Bruck, Ring} {
			for name, f := range countPatterns {
				cnt := counts(f, n)
				errs := commtest.OnRanks(cs, func(c *Comm) error {
					if err := c.SetAlgorithms(Algorithms{Allgather: algo}); err != nil {
						return err
					}
					recv := sentinel(comm.Sum(cnt) + 1)
					if err := c.Allgatherv(block(c.Rank(), cnt[c.Rank()]), recv, cnt); err != nil {
						return err
					}
					return checkGathered(recv.Int32s(), cnt)
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("np%d %s %s: rank %d: %v", n, algo, name, r, err)
					}
				}
			}
		}
	}
}

// TestGathervEveryRoot gathers to every root at the odd sizes with
// uneven and empty counts; away from the root the receive buffer is not
// touched.
func TestGathervEveryRoot(t *testing.T) {
	for _, n := range oddSizes {
		cs := localGroup(t, n, GroupOptions{Unix: n%2 == 0})
		for name, f := range countPatterns {
			cnt := counts(f, n)
			for root := range n {
				errs := commtest.OnRanks(cs, func(c *Comm) error {
					recv := sentinel(comm.Sum(cnt) + 1)
					if err := c.Gatherv(block(c.Rank(), cnt[c.Rank()]), recv, cnt, root); err != nil {
						return err
					}
					if c.Rank() != root {
						return checkGathered(recv.Int32s(), make([]int, n))
					}
					return checkGathered(recv.Int32s(), cnt)
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("np%d %s root %d: rank %d: %v", n, name, root, r, err)
					}
				}
			}
		}
	}
}

// ceilLog2 is ceil(log2 n).
func ceilLog2(n int) int { return bits.Len(uint(n - 1)) }

// peerCounter records, per rank, the peers its collectives exchange
// frames with (through peerHook).
type peerCounter struct {
	mu    sync.Mutex
	peers map[*Comm]map[int]bool
}

// install makes the counter record until the test ends.
func (pc *peerCounter) install(t *testing.T) {
	pc.peers = map[*Comm]map[int]bool{}
	peerHook = func(c *Comm, r int) {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		if pc.peers[c] == nil {
			pc.peers[c] = map[int]bool{}
		}
		pc.peers[c][r] = true
	}
	t.Cleanup(func() { peerHook = nil })
}

// run runs f on every rank and returns the most peers a rank exchanged
// frames with during it.
func (pc *peerCounter) run(t *testing.T, cs []*Comm, f func(c *Comm) error) int {
	t.Helper()
	pc.mu.Lock()
	clear(pc.peers)
	pc.mu.Unlock()
	for r, err := range commtest.OnRanks(cs, f) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	most := 0
	for _, c := range cs {
		most = max(most, len(pc.peers[c]))
	}
	return most
}

// TestPeersGrowAsLog: at 16 ranks, a small allgatherv, a gatherv to any
// root and a barrier, each with its agreement check, exchange frames with
// 2 ceil(log2 n) peers at most, as do the agreement and a split; forced to
// the direct algorithm, the allgatherv talks to every rank.
func TestPeersGrowAsLog(t *testing.T) {
	const n = 16
	cs := localGroup(t, n, GroupOptions{Unix: true})
	var pc peerCounter
	pc.install(t)
	limit := 2 * ceilLog2(n)
	cnt := counts(countPatterns["ragged"], n)
	calls := map[string]func(c *Comm) error{
		"allgatherv": func(c *Comm) error {
			return c.Allgatherv(block(c.Rank(), cnt[c.Rank()]), sentinel(comm.Sum(cnt)), cnt)
		},
		"gatherv to 5": func(c *Comm) error {
			return c.Gatherv(block(c.Rank(), cnt[c.Rank()]), sentinel(comm.Sum(cnt)), cnt, 5)
		},
		"barrier":   func(c *Comm) error { return c.Barrier() },
		"allreduce": func(c *Comm) error { return c.Allreduce(block(0, 64), tensor.Sum) },
		"split": func(c *Comm) error {
			sub, err := c.Split(c.Rank()%2, -c.Rank())
			if err == nil {
				err = sub.Close()
			}
			return err
		},
	}
	for name, f := range calls {
		if got := pc.run(t, cs, f); got > limit {
			t.Errorf("%s: a rank exchanged frames with %d peers, want %d at most", name, got, limit)
		}
	}
	for _, c := range cs {
		c.SetCheck(false)
		c.SetAlgorithms(Algorithms{Allgather: Direct})
	}
	if got := pc.run(t, cs, calls["allgatherv"]); got != n-1 {
		t.Errorf("direct allgatherv: a rank exchanged frames with %d peers at most, want %d", got, n-1)
	}
}

// TestAlgorithmsForced: the forced algorithm is the one that runs, as the
// peers each rank talks to show (the ring's two neighbours, recursive
// doubling's log2 n partners), whatever the size; an unknown algorithm is
// refused, and groups split off inherit the choice.
func TestAlgorithmsForced(t *testing.T) {
	const n = 8
	cs := localGroup(t, n, GroupOptions{Unix: true})
	var pc peerCounter
	pc.install(t)
	small, large := 64, 1<<18 // int32 elements: below and above the thresholds
	tests := []struct {
		algo  Algorithms
		elems int
		call  string
		peers int
	}{
		{Algorithms{Allgather: Ring}, 1, "allgatherv", 2},
		{Algorithms{Allgather: Bruck}, large / n, "allgatherv", 2*ceilLog2(n) - 1},
		{Algorithms{Allgather: Direct}, large / n, "allgatherv", n - 1},
		{Algorithms{}, large / n, "allgatherv", 2},
		{Algorithms{}, 1, "allgatherv", 2*ceilLog2(n) - 1},
		{Algorithms{Allreduce: Ring}, small, "allreduce", 2},
		{Algorithms{Allreduce: Doubling}, large, "allreduce", ceilLog2(n)},
		{Algorithms{Allreduce: Auto}, large, "allreduce", 2},
		{Algorithms{Allreduce: Ring}, n - 1, "allreduce", ceilLog2(n)}, // fewer elements than ranks: doubling
	}
	for _, tt := range tests {
		got := pc.run(t, cs, func(c *Comm) error {
			c.SetCheck(false)
			if err := c.SetAlgorithms(tt.algo); err != nil {
				return err
			}
			if tt.call == "allreduce" {
				return c.Allreduce(block(0, tt.elems), tensor.Sum)
			}
			cnt := counts(func(int, int) int { return tt.elems }, n)
			return c.Allgatherv(block(c.Rank(), tt.elems), sentinel(comm.Sum(cnt)), cnt)
		})
		if got != tt.peers {
			t.Errorf("%s of %d elements with %+v: %d peers, want %d", tt.call, tt.elems, tt.algo, got, tt.peers)
		}
	}
	forced := Algorithms{Allgather: Direct, Allreduce: Ring}
	errs := commtest.OnRanks(cs, func(c *Comm) error {
		if err := c.SetAlgorithms(forced); err != nil {
			return err
		}
		sub, err := c.Split(0, c.Rank())
		if err != nil {
			return err
		}
		if got := sub.(*Comm).Algorithms(); got != forced {
			return fmt.Errorf("split group's algorithms %+v, want %+v", got, forced)
		}
		return sub.Close()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if err := cs[0].SetAlgorithms(Algorithms{Allgather: Doubling}); err == nil || !strings.Contains(err.Error(), `allgather algorithm "doubling"`) {
		t.Errorf("SetAlgorithms(allgather doubling): %v, want it refused", err)
	}
	if err := cs[0].SetAlgorithms(Algorithms{Allreduce: "tree"}); err == nil || cs[0].Algorithms() != forced {
		t.Errorf("SetAlgorithms(allreduce tree): %v, and the algorithms are %+v; want an error and no change", err, cs[0].Algorithms())
	}
}

// TestBarrierAbortLargeGroup: at 9 ranks, one rank aborts while the
// others wait in a barrier, most of them on ranks that are not the one
// that aborted: every wait ends, with the aborting rank's cause.
func TestBarrierAbortLargeGroup(t *testing.T) {
	leakCheck(t)
	const n, bad = 9, 4
	cs := localGroup(t, n, GroupOptions{Unix: true})
	cause := errors.New("rank 4 gives up")
	errs := commtest.OnRanks(cs, func(c *Comm) error {
		if c.Rank() == bad {
			c.Abort(cause)
		}
		return c.Barrier()
	})
	for r, err := range errs {
		if r != bad {
			wantPeerError(t, fmt.Sprintf("rank %d's barrier", r), err, bad, cause.Error())
		} else if !errors.Is(err, cause) {
			t.Errorf("aborting rank's barrier: %v, want its cause", err)
		}
	}
}
