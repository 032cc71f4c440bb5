package runtime

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestJoinAfterCachedAllgather is a past defect, end to end: an
// allgather (cached), then Join on every rank. Join returns the last rank
// on every rank and the runtime keeps working, with the default cache and
// with a cache of one entry.
func TestJoinAfterCachedAllgather(t *testing.T) {
	for _, n := range []int{2, 3} {
		for _, capacity := range []int{1024, 1, 0} {
			t.Run(fmt.Sprintf("np%d/cache%d", n, capacity), func(t *testing.T) {
				cfg := testConfig()
				cfg.CacheCapacity = capacity
				c := startCluster(t, n, cfg)
				c.each(t, func(r *Runtime, rank int) error {
					for i := 0; i < 3; i++ {
						out, err := r.Allgather(ctxT(t), tensor.FromFloat32([]float32{float32(rank), 1}), "x")
						if err != nil {
							return err
						}
						if out.Len() != 2*n || out.Float32s()[2*(n-1)] != float32(n-1) {
							return fmt.Errorf("allgather %v", out.Float32s())
						}
					}
					last, err := r.Join(ctxT(t))
					if err != nil {
						return fmt.Errorf("join: %w", err)
					}
					if last < 0 || last >= n {
						return fmt.Errorf("join returned %d", last)
					}
					v := tensor.FromFloat32([]float32{1})
					if err := r.AllreduceInPlace(ctxT(t), v, "after", Sum); err != nil {
						return fmt.Errorf("allreduce after join: %w", err)
					}
					if v.Float32s()[0] != float32(n) {
						return fmt.Errorf("allreduce after join gave %v", v.Float32s())
					}
					return nil
				})
			})
		}
	}
}

// TestCachedAllgatherWhileJoined: one rank joins while the other repeats a
// cached allgather: the allgather fails with Horovod's error, not the
// runtime, and the job goes on.
func TestCachedAllgatherWhileJoined(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		_, err := r.Allgather(ctxT(t), tensor.FromFloat32([]float32{1}), "x")
		return err
	})
	c.each(t, func(r *Runtime, rank int) error {
		if rank == 1 {
			_, err := r.Join(ctxT(t))
			return err
		}
		_, err := r.Allgather(ctxT(t), tensor.FromFloat32([]float32{1}), "x")
		var oe *OpError
		if !errors.As(err, &oe) || !strings.Contains(oe.Message, "Allgather is not supported with Join") {
			return fmt.Errorf("allgather while rank 1 joined: %v", err)
		}
		_, err = r.Join(ctxT(t))
		return err
	})
	c.each(t, func(r *Runtime, rank int) error {
		_, err := r.Allgather(ctxT(t), tensor.FromFloat32([]float32{1}), "x")
		return err
	})
}

// TestLoopPanicNamesTheRank: rank 1's loop panics at the start of a cycle
// (before it entered any collective): every rank's pending handle fails,
// the others' errors name rank 1 and the panic, and later calls return the
// same root cause. Nothing hangs and the process survives.
func TestLoopPanicNamesTheRank(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			c := startCluster(t, n, testConfig())
			var arm atomic.Bool
			c.rts[1].loop.testPanicHook(func() {
				if arm.CompareAndSwap(true, false) {
					panic("injected fault")
				}
			})
			hs := make([]*Handle, n)
			for r := 0; r < n; r++ {
				// A name only rank 0 submits: it waits, pending, when
				// rank 1 fails.
				name := "pending"
				if r != 0 {
					name = fmt.Sprint("other", r)
				}
				h, err := c.rts[r].AllreduceAsync(fill(tensor.Float32, 4, 1), name, Sum)
				if err != nil {
					t.Fatal(err)
				}
				hs[r] = h
			}
			time.Sleep(5 * time.Millisecond)
			arm.Store(true)
			for r, h := range hs {
				err := h.Wait(ctxT(t))
				checkRootCause(t, r, err, 1, "injected fault")
				if r == 1 {
					var pe *PanicError
					if !errors.As(err, &pe) || len(pe.Stack) == 0 {
						t.Fatalf("rank 1: %v does not carry the PanicError and its stack", err)
					}
				}
				_, err = c.rts[r].AllreduceAsync(fill(tensor.Float32, 1, 1), "later", Sum)
				checkRootCause(t, r, err, 1, "injected fault")
			}
		})
	}
}

// checkRootCause asserts that err, seen on rank me, is a shutdown error that
// names rank failed and contains cause.
func checkRootCause(t *testing.T, me int, err error, failed int, cause string) {
	t.Helper()
	if !errors.Is(err, ErrShutdown) {
		t.Fatalf("rank %d: %v, want ErrShutdown", me, err)
	}
	if !strings.Contains(err.Error(), cause) {
		t.Fatalf("rank %d: %v does not contain the cause %q", me, err, cause)
	}
	if me != failed {
		r, _, ok := FailedRank(err)
		if !ok || r != failed {
			t.Fatalf("rank %d: %v names rank %d (%v), want %d", me, err, r, ok, failed)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("rank %d", failed)) {
			t.Fatalf("rank %d: %q does not name rank %d", me, err, failed)
		}
	}
}

// TestShutdownNamesTheRank: when rank 2 calls Shutdown, the others' pending
// handles say so.
func TestShutdownNamesTheRank(t *testing.T) {
	c := startCluster(t, 3, testConfig())
	h, err := c.rts[0].AllreduceAsync(fill(tensor.Float32, 1, 1), "orphan", Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.rts[2].Shutdown(); err != nil {
		t.Fatal(err)
	}
	err = h.Wait(ctxT(t))
	var re *RankError
	if !errors.Is(err, ErrShutdown) || !errors.As(err, &re) || re.Rank != 2 || !re.Shutdown {
		t.Fatalf("got %v, want ErrShutdown naming rank 2's Shutdown", err)
	}
	if !strings.Contains(err.Error(), "rank 2 called Shutdown") {
		t.Fatalf("message %q", err)
	}
	if _, _, ok := FailedRank(err); ok {
		t.Fatal("a Shutdown is reported as a failure")
	}
}

func TestFarewellCause(t *testing.T) {
	rec := func(kind wire.FarewellKind, text string) []byte {
		return wire.AppendFarewell(nil, wire.Farewell{Kind: kind, Text: text})
	}
	for _, tt := range []struct {
		name string
		recs [][]byte
		me   int
		want string
	}{
		{"clean", [][]byte{rec(wire.FarewellShutdown, ""), rec(wire.FarewellNone, "")}, 0, "<nil>"},
		{"other asked", [][]byte{rec(wire.FarewellShutdown, ""), rec(wire.FarewellNone, "")}, 1, "hvd: rank 0 called Shutdown"},
		{"failure wins", [][]byte{rec(wire.FarewellShutdown, ""), rec(wire.FarewellNone, ""), rec(wire.FarewellFailed, "boom")}, 0, "hvd: rank 2 failed: boom"},
		{"lowest failure", [][]byte{rec(wire.FarewellNone, ""), rec(wire.FarewellFailed, "a"), rec(wire.FarewellFailed, "b")}, 2, "hvd: rank 1 failed: a"},
		{"stall", [][]byte{rec(wire.FarewellStall, "hvd: stall inspector: x"), rec(wire.FarewellNone, "")}, 1, "hvd: rank 0 failed: hvd: stall inspector: x"},
		{"unreadable", [][]byte{nil, nil}, 0, "<nil>"},
	} {
		var c cycle.Control // no failure of its own: the records decide
		var got error
		if o := c.Resolve(tt.recs, tt.me, nil); o.Found {
			got = rankError(o.Cause)
		}
		if got := fmt.Sprint(got); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// testPanicHook makes the loop call f at the start of every cycle.
func (l *loop) testPanicHook(f func()) { l.testPanic.Store(&f) }

// TestStallShutdownReachesEveryRank: rank 0's stall inspector shuts the
// job down; rank 1's pending handle names rank 0's stall report, which
// names the tensors.
func TestStallShutdownReachesEveryRank(t *testing.T) {
	cfg := testConfig()
	cfg.StallCheckTime = 20 * time.Millisecond
	cfg.StallShutdownTime = 40 * time.Millisecond
	c := startCluster(t, 2, cfg)
	h0, err := c.rts[0].AllreduceAsync(fill(tensor.Float32, 1, 1), "a", Sum)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := c.rts[1].AllreduceAsync(fill(tensor.Float32, 1, 1), "b", Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := h0.Wait(ctxT(t)); !errors.As(err, new(*StallError)) {
		t.Fatalf("rank 0: %v, want its StallError", err)
	}
	err = h1.Wait(ctxT(t))
	var re *RankError
	if !errors.Is(err, ErrShutdown) || !errors.As(err, &re) || re.Rank != 0 || !re.Stall ||
		!strings.Contains(err.Error(), "allreduce.a") {
		t.Fatalf("rank 1: %v, want rank 0's stall report", err)
	}
}

// TestGroupCloseAfterFailedStep: a group whose step was in flight when the
// runtime stopped closes without error (its entries are out of flight).
func TestGroupCloseAfterFailedStep(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	g, err := c.rts[0].NewAllreduceGroup([]*tensor.Tensor{fill(tensor.Float32, 4, 1)}, []string{"w"}, Sum)
	if err != nil {
		t.Fatal(err)
	}
	h, err := g.Start() // rank 1 never submits: in flight until the stop
	if err != nil {
		t.Fatal(err)
	}
	if err := c.rts[1].Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(ctxT(t)); !errors.Is(err, ErrShutdown) {
		t.Fatalf("step: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatalf("Close after the stop: %v", err)
	}
	if _, err := g.Start(); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

func TestRankErrorSaysWhatWentSilent(t *testing.T) {
	for _, tc := range []struct {
		e    RankError
		want string
	}{
		{RankError{Rank: 2, Host: "n2", Frozen: true, Message: "m"}, "hvd: rank 2 (host n2) froze: m"},
		{RankError{Rank: 2, Host: "n2", Frozen: true, Unreachable: true, Message: "m"}, "hvd: rank 2: its node (host n2) went silent: m"},
		{RankError{Rank: 1, Frozen: true, Unreachable: true, Message: "m"}, "hvd: rank 1: its node went silent: m"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
	}
}
