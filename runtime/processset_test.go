package runtime

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// initEach initialises one runtime per member of group, concurrently, with
// the options optsFor gives each rank, and returns them with each rank's
// Init error. The runtimes that started are shut down at the end of the
// test.
func initEach(t *testing.T, group []comm.Communicator, optsFor func(rank int) []Option) ([]*Runtime, []error) {
	t.Helper()
	rts := make([]*Runtime, len(group))
	for i := range rts {
		rts[i] = new(Runtime)
	}
	errs := commtest.OnRanks(commtest.Ranks(len(group)), func(i int) error {
		opts := []Option{WithCommunicator(group[i]), WithConfig(testConfig()), WithLogger(zerolog.Nop())}
		return rts[i].Init(append(opts, optsFor(i)...)...)
	})
	t.Cleanup(func() { StopLocal(rts) })
	return rts, errs
}

// startParity starts n ranks with the even and odd ranks as static sets.
func startParity(t *testing.T, n int) ([]*Runtime, []*ProcessSet, []*ProcessSet) {
	t.Helper()
	evens, odds := make([]*ProcessSet, n), make([]*ProcessSet, n)
	rts, errs := initEach(t, memcomm.NewGroup(n), func(rank int) []Option {
		var opts []Option
		opts, evens[rank], odds[rank] = staticParitySets(n)
		return opts
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Init: %v", i, err)
		}
	}
	return rts, evens, odds
}

func TestProcessSetsDisjoint(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts, evens, odds := startParity(t, n)
			(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error { return scenarioDisjointSets(r, evens[rank], odds[rank]) })
		})
	}
}

func TestProcessSetErrors(t *testing.T) {
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts, evens, odds := startParity(t, n)
			(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error { return scenarioErrors(r, evens[rank], odds[rank]) })
		})
	}
}

func TestProcessSetsDynamic(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts, errs := initEach(t, memcomm.NewGroup(n), func(int) []Option { return []Option{WithDynamicProcessSets()} })
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error { return scenarioDynamic(r) })
		})
	}
}

// TestProcessSetsSmallCache: the sets' own response caches, at a capacity
// of one entry, with names repeating in every set.
func TestProcessSetsSmallCache(t *testing.T) {
	const n = 3
	evens, odds := make([]*ProcessSet, n), make([]*ProcessSet, n)
	cfg := testConfig()
	cfg.CacheCapacity = 1
	rts, errs := initEach(t, memcomm.NewGroup(n), func(rank int) []Option {
		var opts []Option
		opts, evens[rank], odds[rank] = staticParitySets(n)
		return append(opts, WithConfig(cfg))
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error { return scenarioDisjointSets(r, evens[rank], odds[rank]) })
}

func TestProcessSetsMismatchedAtInit(t *testing.T) {
	const n = 3
	_, errs := initEach(t, memcomm.NewGroup(n), func(rank int) []Option {
		if rank == 1 {
			return []Option{WithProcessSets(NewProcessSet(0, 1), NewProcessSet(2))}
		}
		return []Option{WithProcessSets(NewProcessSet(0, 1))}
	})
	for i, err := range errs {
		if !errors.Is(err, ErrProcessSetInit) || !strings.Contains(err.Error(), MismatchedProcessSetsText) {
			t.Errorf("rank %d: Init = %v, want the mismatch", i, err)
		}
	}
	_, errs = initEach(t, memcomm.NewGroup(n), func(rank int) []Option {
		return []Option{WithProcessSets(NewProcessSet(0, rank))}
	})
	for i, err := range errs {
		if !errors.Is(err, ErrProcessSetInit) || !strings.Contains(err.Error(), "mismatching process sets") {
			t.Errorf("rank %d: Init with different ranks = %v", i, err)
		}
	}
	_, errs = initEach(t, memcomm.NewGroup(n), func(rank int) []Option {
		return []Option{WithProcessSets(NewProcessSet(0, 1), NewProcessSet(1, 0))}
	})
	for i, err := range errs {
		if !errors.Is(err, ErrExistingProcessSet) || !strings.Contains(err.Error(),
			"Horovod could not be initialized because process_sets entry number 1 is a duplicate: ProcessSet(process_set_id=None, ranks=[0, 1], mpi_comm=None)") {
			t.Errorf("rank %d: Init with a duplicate set = %v", i, err)
		}
	}
	_, errs = initEach(t, memcomm.NewGroup(n), func(rank int) []Option {
		return []Option{WithProcessSets(NewProcessSet(0, 3))}
	})
	for i, err := range errs {
		if !errors.Is(err, ErrProcessSetInit) || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("rank %d: Init with an out-of-range rank = %v", i, err)
		}
	}
}

// TestProcessSetSharedAcrossRuntimes: StartLocal gives every rank the same
// options, so a static set would be shared by the ranks' Runtimes: every
// rank's Init refuses, saying what to do instead.
func TestProcessSetSharedAcrossRuntimes(t *testing.T) {
	_, err := StartLocal(3, WithProcessSets(NewProcessSet(0, 1)), WithLogger(zerolog.Nop()))
	if !errors.Is(err, ErrProcessSetInit) || !strings.Contains(err.Error(), "WithDynamicProcessSets and AddProcessSet") {
		t.Fatalf("StartLocal with a shared static set: %v", err)
	}
}

// TestProcessSetFromComm: a set whose members are the ranks of a
// communicator split from the runtime's, given only on the members.
func TestProcessSetFromComm(t *testing.T) {
	const n = 4
	group := memcomm.NewGroup(n)
	subs := make([]comm.Communicator, n)
	var wg sync.WaitGroup
	for i := range group {
		wg.Add(1)
		go func() {
			defer wg.Done()
			color := -1
			if i == 1 || i == 3 {
				color = 0
			}
			subs[i], _ = group[i].Split(color, -i) // reversed order: the set sorts
		}()
	}
	wg.Wait()
	sets := make([]*ProcessSet, n)
	rts, errs := initEach(t, group, func(rank int) []Option {
		sets[rank] = ProcessSetFromComm(subs[rank])
		if got, want := sets[rank].String(), "ProcessSet(process_set_id=None, ranks=None, mpi_comm=<communicator>)"; got != want {
			t.Errorf("before Init: %q, want %q", got, want)
		}
		return []Option{WithProcessSets(sets[rank])}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error {
		ps := sets[rank]
		if fmt.Sprint(ps.Ranks()) != "[1 3]" || ps.ID() != 1 || ps.Included() != (rank%2 == 1) ||
			ps.String() != "ProcessSet(process_set_id=1, ranks=[1, 3], mpi_comm=<communicator>)" {
			return fmt.Errorf("set %v included %v", ps, ps.Included())
		}
		if !ps.Included() {
			return nil
		}
		s, err := r.Allreduce(ctxT(t), tensor.FromInt64([]int64{int64(rank)}), "x", Sum, InProcessSet(ps))
		if err != nil {
			return err
		}
		if s.Int64s()[0] != 4 {
			return fmt.Errorf("sum %d", s.Int64s()[0])
		}
		return nil
	})
}

// TestProcessSetRemovedWhilePending: an operation queued in a set that is
// removed before it could run fails with ErrUnknownProcessSet, on the rank
// that queued it; nothing hangs.
func TestProcessSetRemovedWhilePending(t *testing.T) {
	const n = 3
	rts, errs := initEach(t, memcomm.NewGroup(n), func(int) []Option { return []Option{WithDynamicProcessSets()} })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error {
		ctx := ctxT(t)
		ps, err := r.AddProcessSet(ctx, []int{0, 1})
		if err != nil {
			return err
		}
		var h *Handle
		if rank == 0 { // rank 1 never submits it
			if h, err = r.AllreduceAsync(tensor.FromFloat64([]float64{1}), "lonely", Sum, InProcessSet(ps)); err != nil {
				return err
			}
		}
		if err := r.RemoveProcessSet(ctx, ps); err != nil {
			return err
		}
		if h != nil {
			if err := h.Wait(ctx); !errors.Is(err, ErrUnknownProcessSet) {
				return fmt.Errorf("pending allreduce of a removed set: %v", err)
			}
		}
		return nil
	})
}

// TestProcessSetFailureReachesMembers: a rank whose loop fails, before
// the cycle's collectives (told in the farewell) or inside a set's cycle
// (the transport torn down), fails its set's members waiting in the set,
// with the failed rank named; nothing hangs.
func TestProcessSetFailureReachesMembers(t *testing.T) {
	for _, inSet := range []bool{false, true} {
		t.Run(fmt.Sprintf("in_set=%v", inSet), func(t *testing.T) {
			rts, evens, _ := startParity(t, 3) // even: ranks 0 and 2
			ctx := ctxT(t)
			// A first allreduce in the set, so that its loops exist and
			// have cycled.
			(&cluster{rts: []*Runtime{rts[0], rts[2]}}).each(t, func(r *Runtime, i int) error {
				_, err := r.Allreduce(ctx, tensor.FromFloat64([]float64{1}), "warm", Sum, InProcessSet(evens[2*i]))
				return err
			})
			boom := func() { panic("boom") }
			if inSet {
				rts[2].psets[1].loop.testPanicHook(boom)
			} else {
				rts[2].loop.testPanicHook(boom)
			}
			_, err := rts[0].Allreduce(ctx, tensor.FromFloat64([]float64{1}), "x", Sum, InProcessSet(evens[0]))
			if rank, cause, ok := FailedRank(err); !ok || rank != 2 || !strings.Contains(cause, "boom") {
				t.Fatalf("rank 0's allreduce in the set: %v (failed rank %d %q)", err, rank, cause)
			}
			if _, err := rts[1].Allreduce(ctx, tensor.FromFloat64([]float64{1}), "y", Sum); !errors.Is(err, ErrShutdown) {
				t.Fatalf("rank 1, outside the set: %v", err)
			}
		})
	}
}

// TestProcessSetStallShutsDown: a stall within a set (rank 2 never submits
// the set's tensor) is reported by the set's inspector, naming the set, and
// with a shutdown time stops the whole job through the global set: every
// rank's pending and later calls fail; nothing hangs.
func TestProcessSetStallShutsDown(t *testing.T) {
	const n = 3
	cfg := testConfig()
	cfg.StallCheckTime = 20 * time.Millisecond
	cfg.StallShutdownTime = 40 * time.Millisecond
	evens := make([]*ProcessSet, n)
	rts, errs := initEach(t, memcomm.NewGroup(n), func(rank int) []Option {
		evens[rank] = NewProcessSet(0, 2)
		return []Option{WithConfig(cfg), WithProcessSets(evens[rank])}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	h, err := rts[0].AllreduceAsync(tensor.FromFloat64([]float64{1}), "late", Sum, InProcessSet(evens[0]))
	if err != nil {
		t.Fatal(err)
	}
	err = h.Wait(ctxT(t))
	if !errors.Is(err, ErrShutdown) || !strings.Contains(err.Error(), "process set 1: ") ||
		!strings.Contains(err.Error(), "allreduce.late") {
		t.Fatalf("rank 0's allreduce in the stalled set: %v", err)
	}
	for _, r := range rts[1:] {
		if _, err := r.Allreduce(ctxT(t), tensor.FromFloat64([]float64{1}), "x", Sum); !errors.Is(err, ErrShutdown) {
			t.Fatalf("rank %d after the stall: %v", r.Rank(), err)
		}
	}
}

// TestProcessSetNotRunning: registrations before Init and after Shutdown
// fail with Horovod's codes (ProcessSetErrorInit, ProcessSetErrorShutdown)
// and still match the runtime's own errors.
func TestProcessSetNotRunning(t *testing.T) {
	ctx := ctxT(t)
	var pe *ProcessSetError
	r := new(Runtime)
	_, err := r.AddProcessSet(ctx, []int{0})
	if !errors.As(err, &pe) || pe.Code != ProcessSetErrorInit || !errors.Is(err, ErrNotInitialized) ||
		err.Error() != "hvd: AddProcessSet: "+notInitializedText {
		t.Fatalf("AddProcessSet before Init: %v", err)
	}
	rts, errs := initEach(t, memcomm.NewGroup(2), func(int) []Option { return []Option{WithDynamicProcessSets()} })
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var sets [2]*ProcessSet
	(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error {
		p, err := r.AddProcessSet(ctx, []int{0})
		sets[rank] = p
		return err
	})
	if t.Failed() {
		return
	}
	ps := sets[0]
	StopLocal(rts)
	for _, err := range []error{
		func() error { _, err := rts[0].AddProcessSet(ctx, []int{1}); return err }(),
		rts[0].RemoveProcessSet(ctx, ps),
	} {
		if !errors.As(err, &pe) || pe.Code != ProcessSetErrorShutdown || !errors.Is(err, ErrShutdown) {
			t.Fatalf("after Shutdown: %v", err)
		}
	}
}
