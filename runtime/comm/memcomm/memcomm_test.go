package memcomm

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// onRanks runs f on every member of comms, each in its own goroutine, and
// returns each rank's error.
func onRanks(comms []comm.Communicator, f func(c comm.Communicator) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() { errs[r] = f(c) })
	}
	wg.Wait()
	return errs
}

// sumCheck is a correct allreduce that must still work on every rank.
func sumCheck(c comm.Communicator) error {
	v := []int64{int64(c.Rank())}
	if err := c.Allreduce(tensor.FromInt64(v), tensor.Sum); err != nil {
		return err
	}
	n := int64(c.Size())
	if v[0] != n*(n-1)/2 {
		return fmt.Errorf("sum of ranks %d, want %d", v[0], n*(n-1)/2)
	}
	return nil
}

func f32(vs ...float32) *tensor.Tensor { return tensor.FromFloat32(vs) }

// TestMemoryMismatch checks that arguments that disagree, including
// different collectives at the same step, give a *comm.MismatchError on every
// rank that names what disagreed, and that the group keeps working.
func TestMemoryMismatch(t *testing.T) {
	const n = 3
	tests := []struct {
		name   string
		call   func(c comm.Communicator) error
		detail string // in every rank's message
	}{
		{"allreduce vs bcast", func(c comm.Communicator) error {
			if c.Rank() == 1 {
				return c.Bcast(f32(1), 0)
			}
			return c.Allreduce(f32(1), tensor.Sum)
		}, "rank 0 called allreduce, rank 1 called bcast"},
		{"barrier vs split", func(c comm.Communicator) error {
			if c.Rank() == 2 {
				_, err := c.Split(0, 0)
				return err
			}
			return c.Barrier()
		}, "rank 0 called barrier, rank 2 called split"},
		{"allgatherv vs gatherv", func(c comm.Communicator) error {
			counts := []int{1, 1, 1}
			if c.Rank() == 0 {
				return c.Gatherv(f32(1), f32(0, 0, 0), counts, 0)
			}
			return c.Allgatherv(f32(1), f32(0, 0, 0), counts)
		}, "rank 0 called gatherv, rank 1 called allgatherv"},
		{"splitlocal vs reducescatter", func(c comm.Communicator) error {
			if c.Rank() == 0 {
				_, err := c.SplitLocal()
				return err
			}
			return c.ReduceScatter(f32(1, 2, 3), f32(0), []int{1, 1, 1}, tensor.Sum)
		}, "rank 0 called splitlocal, rank 1 called reducescatter"},
		{"allreduce lengths", func(c comm.Communicator) error {
			buf := tensor.New(tensor.Float32, 4+c.Rank()/2)
			return c.Allreduce(buf, tensor.Sum)
		}, "element counts 4 (rank 0) and 5 (rank 2)"},
		{"allreduce dtypes", func(c comm.Communicator) error {
			dt := tensor.Float32
			if c.Rank() == 1 {
				dt = tensor.Int32
			}
			return c.Allreduce(tensor.New(dt, 4), tensor.Sum)
		}, "dtypes float32 (rank 0) and int32 (rank 1)"},
		{"allreduce ops", func(c comm.Communicator) error {
			op := tensor.Sum
			if c.Rank() == 2 {
				op = tensor.Max
			}
			return c.Allreduce(f32(1), op)
		}, "reductions Sum (rank 0) and Max (rank 2)"},
		{"bcast roots", func(c comm.Communicator) error {
			return c.Bcast(f32(1), c.Rank()%2)
		}, "roots 0 (rank 0) and 1 (rank 1)"},
		{"gatherv counts", func(c comm.Communicator) error {
			counts := []int{1, 1, 1}
			if c.Rank() == 2 {
				counts = []int{1, 2, 1}
			}
			send := tensor.New(tensor.Float32, counts[c.Rank()])
			return c.Gatherv(send, tensor.New(tensor.Float32, 4), counts, 0)
		}, "counts [1 1 1] (rank 0) and [1 2 1] (rank 2)"},
		{"alltoallv pairing", func(c comm.Communicator) error {
			send, recv := []int{1, 1, 1}, []int{1, 1, 1}
			if c.Rank() == 2 {
				recv = []int{1, 0, 1}
			}
			return c.Alltoallv(tensor.New(tensor.Int8, 3), send, tensor.New(tensor.Int8, 3), recv)
		}, "rank 1 sends 1 elements to rank 2, which expects 0"},
	}
	comms := NewGroup(n)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := onRanks(comms, tt.call)
			for r, err := range errs {
				var mm *comm.MismatchError
				if !errors.As(err, &mm) {
					t.Errorf("rank %d: error %v, want a *comm.MismatchError", r, err)
					continue
				}
				if !strings.Contains(err.Error(), tt.detail) {
					t.Errorf("rank %d: %q does not say %q", r, err, tt.detail)
				}
			}
			for r, err := range onRanks(comms, sumCheck) {
				if err != nil {
					t.Errorf("rank %d: allreduce after the mismatch: %v", r, err)
				}
			}
		})
	}
}

// TestMemoryLocalError checks that a rank's own bad argument reaches that
// rank as itself and the others as a *comm.MismatchError naming the rank.
func TestMemoryLocalError(t *testing.T) {
	comms := NewGroup(3)
	errs := onRanks(comms, func(c comm.Communicator) error {
		n := 1
		if c.Rank() == 1 {
			n = 2
		}
		return c.Allgatherv(tensor.New(tensor.Float32, n), tensor.New(tensor.Float32, 3), []int{1, 1, 1})
	})
	const local = "comm: allgatherv: send buffer holds 2 elements, want 1"
	for r, err := range errs {
		var mm *comm.MismatchError
		switch {
		case r == 1 && (err == nil || err.Error() != local):
			t.Errorf("rank 1: %v, want %q", err, local)
		case r != 1 && (!errors.As(err, &mm) || !strings.Contains(err.Error(), "rank 1: "+local)):
			t.Errorf("rank %d: %v, want a *comm.MismatchError naming rank 1's problem", r, err)
		}
	}
	// A device tensor is refused, not dereferenced.
	dev := tensor.NewDevice(tensor.Float32, tensor.Device{Kind: tensor.GPU}, 0x1000, 4)
	errs = onRanks(comms, func(c comm.Communicator) error {
		if c.Rank() == 0 {
			return c.Allreduce(dev, tensor.Sum)
		}
		return c.Allreduce(tensor.New(tensor.Float32, 4), tensor.Sum)
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "host tensors only") {
			t.Errorf("rank %d: %v, want the device tensor refused", r, err)
		}
	}
	for r, err := range onRanks(comms, sumCheck) {
		if err != nil {
			t.Errorf("rank %d: allreduce after the errors: %v", r, err)
		}
	}
}

// waitArrived blocks until k ranks of c's group are waiting in a step.
func waitArrived(c comm.Communicator, k int) {
	g := c.(*memComm).g
	for {
		g.mu.Lock()
		a := g.arrived
		g.mu.Unlock()
		if a == k {
			return
		}
		runtime.Gosched()
	}
}

// TestMemoryCloseReleases checks that Close on one rank releases every rank
// blocked in a collective with comm.ErrClosed, and that later calls on every
// rank get comm.ErrClosed.
func TestMemoryCloseReleases(t *testing.T) {
	blocked := []struct {
		name string
		call func(c comm.Communicator) error
	}{
		{"allreduce", func(c comm.Communicator) error { return c.Allreduce(f32(1), tensor.Sum) }},
		{"large allreduce", func(c comm.Communicator) error {
			return c.Allreduce(tensor.New(tensor.Float32, parallelBytes), tensor.Sum)
		}},
		{"barrier", func(c comm.Communicator) error { return c.Barrier() }},
		{"split", func(c comm.Communicator) error { _, err := c.Split(0, 0); return err }},
	}
	for _, tt := range blocked {
		t.Run(tt.name, func(t *testing.T) {
			const n = 4
			comms := NewGroup(n)
			errs := make([]error, n-1)
			var wg sync.WaitGroup
			for r := range n - 1 {
				wg.Go(func() { errs[r] = tt.call(comms[r]) })
			}
			waitArrived(comms[0], n-1)
			if err := comms[n-1].Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			wg.Wait()
			for r, err := range errs {
				if !errors.Is(err, comm.ErrClosed) {
					t.Errorf("blocked rank %d: %v, want comm.ErrClosed", r, err)
				}
			}
			for r, c := range comms {
				if err := c.Barrier(); !errors.Is(err, comm.ErrClosed) {
					t.Errorf("rank %d after close: %v, want comm.ErrClosed", r, err)
				}
				if err := c.Close(); err != nil {
					t.Errorf("second close on rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestMemoryCloseDuringCollectives closes a group while its ranks run
// allreduces of both kinds in a loop: every rank must stop with comm.ErrClosed
// (none stranded inside a collective), and every allreduce that succeeded
// must be right.
func TestMemoryCloseDuringCollectives(t *testing.T) {
	const n = 4
	for _, elems := range []int{1, parallelBytes/4 + 1} {
		for trial := range 20 {
			comms := NewGroup(n)
			var done atomic.Int64
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() {
					buf := make([]float32, elems)
					for k := 0; ; k++ {
						for i := range buf {
							buf[i] = float32(r + k)
						}
						if err := c.Allreduce(tensor.FromFloat32(buf), tensor.Sum); err != nil {
							errs[r] = err
							return
						}
						if want := float32(n*k + n*(n-1)/2); buf[0] != want || buf[elems-1] != want {
							errs[r] = fmt.Errorf("step %d: sum %v, want %v", k, buf[0], want)
							return
						}
						done.Add(1)
					}
				})
			}
			for done.Load() < int64(trial) {
				runtime.Gosched()
			}
			comms[trial%n].Close()
			wg.Wait()
			for r, err := range errs {
				if !errors.Is(err, comm.ErrClosed) {
					t.Fatalf("elems %d, trial %d, rank %d: %v, want comm.ErrClosed", elems, trial, r, err)
				}
			}
		}
	}
}

// TestMemoryTimeout checks that a rank that never arrives tears the group
// down after the timeout, with an error naming it, and that steps that
// complete in time are not affected by the timer.
func TestMemoryTimeout(t *testing.T) {
	inTime := NewGroupWith(3, GroupOptions{Timeout: time.Minute})
	for r, err := range onRanks(inTime, func(c comm.Communicator) error {
		for range 100 {
			if err := sumCheck(c); err != nil {
				return err
			}
		}
		return nil
	}) {
		if err != nil {
			t.Fatalf("rank %d, steps in time: %v", r, err)
		}
	}

	comms := NewGroupWith(3, GroupOptions{Timeout: 50 * time.Millisecond})
	errs := onRanks(comms[:2], func(c comm.Communicator) error { return c.Allreduce(f32(1), tensor.Sum) })
	for r, err := range errs {
		var te *TimeoutError
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, comm.ErrClosed) || !errors.As(err, &te) {
			t.Fatalf("rank %d: %v, want a *TimeoutError matching ErrTimeout and comm.ErrClosed", r, err)
		}
		if !slices.Equal(te.Missing, []int{2}) || te.Op != "allreduce" {
			t.Errorf("rank %d: %+v, want rank 2 missing from allreduce", r, te)
		}
	}
	if err := comms[2].Allreduce(f32(1), tensor.Sum); !errors.Is(err, ErrTimeout) {
		t.Errorf("late rank: %v, want the timeout", err)
	}
}

// TestMemoryNodes checks SplitLocal over simulated nodes, and the
// cross-node groups a runtime builds from it.
func TestMemoryNodes(t *testing.T) {
	tests := []struct {
		nodes  []int   // GroupOptions.Nodes
		nodeOf []int   // or GroupOptions.NodeOf
		local  [][]int // members of each rank's local group
		cross  [][]int // members of Split(localRank, rank)
	}{
		{[]int{2, 2}, nil, [][]int{{0, 1}, {0, 1}, {2, 3}, {2, 3}}, [][]int{{0, 2}, {1, 3}, {0, 2}, {1, 3}}},
		{[]int{1, 3}, nil, [][]int{{0}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}}, [][]int{{0, 1}, {0, 1}, {2}, {3}}},
		{[]int{4}, nil, [][]int{{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}}, [][]int{{0}, {1}, {2}, {3}}},
		// Nodes whose ranks are not consecutive, and arbitrary labels.
		{nil, []int{0, 1, 0, 1}, [][]int{{0, 2}, {1, 3}, {0, 2}, {1, 3}}, [][]int{{0, 1}, {0, 1}, {2, 3}, {2, 3}}},
		{nil, []int{5, 3, 5}, [][]int{{0, 2}, {1}, {0, 2}}, [][]int{{0, 1}, {0, 1}, {2}}},
	}
	for _, tt := range tests {
		name := fmt.Sprint(tt.nodes)
		n := comm.Sum(tt.nodes)
		if tt.nodeOf != nil {
			name, n = fmt.Sprintf("nodeOf=%v", tt.nodeOf), len(tt.nodeOf)
		}
		t.Run(name, func(t *testing.T) {
			comms := NewGroupWith(n, GroupOptions{Nodes: tt.nodes, NodeOf: tt.nodeOf})
			// Every rank makes the same calls whatever it finds, so that a
			// failure on one rank cannot leave the others waiting.
			errs := onRanks(comms, func(c comm.Communicator) error {
				r := c.Rank()
				var problems []error
				loc, err := c.SplitLocal()
				if err != nil {
					return err
				}
				if got := groupMembers(loc, r); !slices.Equal(got, tt.local[r]) {
					problems = append(problems, fmt.Errorf("local group %v, want %v", got, tt.local[r]))
				}
				cross, err := c.Split(loc.Rank(), r)
				if err != nil {
					return err
				}
				if got := groupMembers(cross, r); !slices.Equal(got, tt.cross[r]) {
					problems = append(problems, fmt.Errorf("cross group %v, want %v", got, tt.cross[r]))
				}
				// A group made by Split keeps its members' nodes: here
				// every cross group has one rank per node.
				crossLocal, err := cross.SplitLocal()
				if err != nil {
					return err
				}
				if crossLocal.Size() != 1 {
					problems = append(problems, fmt.Errorf("local group of a cross group has %d ranks, want 1", crossLocal.Size()))
				}
				return errors.Join(problems...)
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// groupMembers returns the parent ranks of c's members (by gathering them).
func groupMembers(c comm.Communicator, parentRank int) []int {
	counts := make([]int, c.Size())
	for i := range counts {
		counts[i] = 1
	}
	out := make([]int64, c.Size())
	if err := c.Allgatherv(tensor.FromInt64([]int64{int64(parentRank)}), tensor.FromInt64(out), counts); err != nil {
		return nil
	}
	ints := make([]int, len(out))
	for i, v := range out {
		ints[i] = int(v)
	}
	return ints
}

// TestMemorySubgroupIndependent checks that closing a group made by Split
// leaves its parent working.
func TestMemorySubgroupIndependent(t *testing.T) {
	comms := NewGroup(2)
	errs := onRanks(comms, func(c comm.Communicator) error {
		sub, err := c.Split(0, 0)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			sub.Close()
		}
		return sumCheck(c)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestMemoryAbortReachesSubgroups: a rank that aborts the parent group
// releases a member of a group split from it that waits there in a
// collective (for a member that never comes), with the same *comm.PeerError, as a real transport whose split groups
// share the parent's connections does.
func TestMemoryAbortReachesSubgroups(t *testing.T) {
	comms := NewGroup(3)
	errs := onRanks(comms, func(c comm.Communicator) error {
		color := 0
		if c.Rank() == 2 {
			color = -1
		}
		sub, err := c.Split(color, c.Rank())
		if c.Rank() == 2 {
			return c.(comm.Aborter).Abort(errors.New("boom"))
		}
		if err != nil {
			return err
		}
		if c.Rank() == 1 {
			return nil // rank 0 waits for it in the subgroup until the abort
		}
		err = sub.Allreduce(tensor.FromFloat64([]float64{1}), tensor.Sum)
		var pe *comm.PeerError
		if !errors.As(err, &pe) || pe.Rank != 2 || pe.Cause != "boom" {
			return fmt.Errorf("allreduce in the subgroup: %v, want rank 2's abort", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestMemoryFoldOrder checks the documented reduction order (a left fold in
// rank order) for small and for large (parallel) allreduces: with these
// values every other order rounds differently.
func TestMemoryFoldOrder(t *testing.T) {
	contrib := []float32{1e8, 1, -1e8, 1}
	for _, n := range []int{1, parallelBytes / 4} {
		comms := NewGroup(4)
		errs := onRanks(comms, func(c comm.Communicator) error {
			buf := make([]float32, n)
			for i := range buf {
				buf[i] = contrib[c.Rank()]
			}
			if err := c.Allreduce(tensor.FromFloat32(buf), tensor.Sum); err != nil {
				return err
			}
			for i, v := range buf {
				if v != 1 {
					return fmt.Errorf("element %d of %d is %v, want 1 (((1e8+1)-1e8)+1 in float32)", i, n, v)
				}
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("n=%d rank %d: %v", n, r, err)
			}
		}
	}
}

// TestMemoryAllgathervInPlace checks the documented in-place form: each
// rank's send tensor is its own block of recv.
func TestMemoryAllgathervInPlace(t *testing.T) {
	comms := NewGroup(3)
	counts := []int{2, 0, 3}
	off := comm.Offsets(counts)
	errs := onRanks(comms, func(c comm.Communicator) error {
		r := c.Rank()
		recv := make([]int32, comm.Sum(counts))
		for i := range counts[r] {
			recv[off[r]+i] = int32(10*r + i)
		}
		all := tensor.FromInt32(recv)
		if err := c.Allgatherv(all.Rows(off[r], off[r]+counts[r]), all, counts); err != nil {
			return err
		}
		if want := []int32{0, 1, 20, 21, 22}; !slices.Equal(recv, want) {
			return fmt.Errorf("got %v, want %v", recv, want)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestMemoryStress alternates collectives of every size class many times,
// so that the race detector sees the reuse of posts and scratch space.
func TestMemoryStress(t *testing.T) {
	const n, rounds = 4, 40
	comms := NewGroup(n)
	errs := onRanks(comms, func(c comm.Communicator) error {
		r := c.Rank()
		big := make([]float32, parallelBytes/4+5)
		for k := range rounds {
			for i := range big {
				big[i] = float32(r + k)
			}
			if err := c.Allreduce(tensor.FromFloat32(big), tensor.Max); err != nil {
				return err
			}
			if big[0] != float32(n-1+k) || big[len(big)-1] != float32(n-1+k) {
				return fmt.Errorf("round %d: max %v, want %d", k, big[0], n-1+k)
			}
			if err := sumCheck(c); err != nil {
				return fmt.Errorf("round %d: %w", k, err)
			}
			b := []int32{int32(r * k)}
			if err := c.Bcast(tensor.FromInt32(b), k%n); err != nil {
				return err
			}
			if b[0] != int32(k%n*k) {
				return fmt.Errorf("round %d: bcast gave %d, want %d", k, b[0], k%n*k)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestNewGroupPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
	}{
		{"no ranks", func() { NewGroup(0) }},
		{"no nodes", func() { NewGroupNodes() }},
		{"empty node", func() { NewGroupNodes(2, 0) }},
		{"nodes disagree", func() { NewGroupWith(3, GroupOptions{Nodes: []int{1, 1}}) }},
		{"short NodeOf", func() { NewGroupWith(3, GroupOptions{NodeOf: []int{0, 1}}) }},
		{"negative NodeOf", func() { NewGroupWith(2, GroupOptions{NodeOf: []int{0, -1}}) }},
		{"Nodes and NodeOf", func() { NewGroupWith(2, GroupOptions{Nodes: []int{2}, NodeOf: []int{0, 0}}) }},
		{"negative timeout", func() { NewGroupWith(1, GroupOptions{Timeout: -1}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p == nil || !strings.HasPrefix(fmt.Sprint(p), "memcomm: ") {
					t.Errorf("panic %v, want one starting with \"memcomm: \"", p)
				}
			}()
			tt.f()
		})
	}
}

// BenchmarkMemoryAllreduce measures one in-memory allreduce (sum of
// float32) across n goroutine ranks: the latency floor for one element,
// the bandwidth for a million.
func BenchmarkMemoryAllreduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, elems := range []int{1, 1 << 20} {
			b.Run(fmt.Sprintf("n=%d/elems=%d", n, elems), func(b *testing.B) {
				comms := NewGroup(n)
				bufs := make([]*tensor.Tensor, n)
				for r := range bufs {
					bufs[r] = tensor.New(tensor.Float32, elems)
				}
				b.SetBytes(int64(4 * elems))
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				for r := 1; r < n; r++ {
					wg.Go(func() {
						for range b.N {
							if err := comms[r].Allreduce(bufs[r], tensor.Sum); err != nil {
								panic(err)
							}
						}
					})
				}
				for range b.N {
					if err := comms[0].Allreduce(bufs[0], tensor.Sum); err != nil {
						b.Fatal(err)
					}
				}
				wg.Wait()
			})
		}
	}
}
