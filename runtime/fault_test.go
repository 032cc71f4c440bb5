package runtime

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/embedded"
	"github.com/gohorovod/gohorovod/runtime/comm/fault"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/internal/negotiate"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// trap wraps a rank's communicator and fails the first data collective
// whose buffer holds magic elements (a size no control message has), or
// the first Barrier when barrier is set: the transport failing under one
// operation. Like a real transport failure, the peers notice: the group
// is aborted with the error, so their blocked calls return a
// *comm.PeerError naming this rank.
type trap struct {
	comm.Communicator
	magic   int
	barrier bool
	err     error
	panics  bool // panic with err instead of returning it (and abort nothing)
	fired   atomic.Bool
}

func (c *trap) hit(ts ...*tensor.Tensor) error {
	for _, t := range ts {
		if t != nil && t.Len() == c.magic && c.fired.CompareAndSwap(false, true) {
			if c.panics {
				panic(c.err)
			}
			c.Abort(c.err)
			return c.err
		}
	}
	return nil
}

func (c *trap) Abort(cause error) error {
	if a, ok := c.Communicator.(comm.Aborter); ok {
		return a.Abort(cause)
	}
	return c.Communicator.Close()
}

func (c *trap) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	if err := c.hit(buf); err != nil {
		return err
	}
	return c.Communicator.Allreduce(buf, op)
}

func (c *trap) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	if err := c.hit(send); err != nil {
		return err
	}
	return c.Communicator.Allgatherv(send, recv, counts)
}

func (c *trap) Bcast(buf *tensor.Tensor, root int) error {
	if err := c.hit(buf); err != nil {
		return err
	}
	return c.Communicator.Bcast(buf, root)
}

func (c *trap) Alltoallv(send *tensor.Tensor, sc []int, recv *tensor.Tensor, rc []int) error {
	if err := c.hit(send); err != nil {
		return err
	}
	return c.Communicator.Alltoallv(send, sc, recv, rc)
}

func (c *trap) ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error {
	if err := c.hit(send); err != nil {
		return err
	}
	return c.Communicator.ReduceScatter(send, recv, counts, op)
}

func (c *trap) Barrier() error {
	if c.barrier && c.fired.CompareAndSwap(false, true) {
		c.Abort(c.err)
		return c.err
	}
	return c.Communicator.Barrier()
}

// faultCase is one collective submitted on every rank of 3, with the
// element count its data collective moves on the failing rank (-1: the
// barrier).
type faultCase struct {
	name  string
	magic int
	// run submits the operation; mk places each input (on the host, or
	// on a device).
	run func(r *Runtime, mk func(*tensor.Tensor) *tensor.Tensor) (*Handle, error)
}

const faultRows = 7 // rows per rank: an odd count, split unevenly by reducescatter

func faultCases() []faultCase {
	vec := func(n int) *tensor.Tensor { return fill(tensor.Float32, n, 1) }
	type mkT = func(*tensor.Tensor) *tensor.Tensor
	return []faultCase{
		{"allreduce", 1237, func(r *Runtime, mk mkT) (*Handle, error) {
			return r.AllreduceAsync(mk(vec(1237)), "g", Sum)
		}},
		{"allreduce-fused", 100 + 200 + 301, func(r *Runtime, mk mkT) (*Handle, error) {
			return r.GroupedAllreduceAsync([]*tensor.Tensor{mk(vec(100)), mk(vec(200)), mk(vec(301))}, "grads", Average)
		}},
		// 3 MiB reduced in 1 MiB chunks (see startFaultCluster): the
		// first chunk fails.
		{"allreduce-chunked", faultChunk / 4, func(r *Runtime, mk mkT) (*Handle, error) {
			return r.AllreduceAsync(mk(vec(3*faultChunk/4)), "big", Sum)
		}},
		{"allgather", faultRows * 3, func(r *Runtime, mk mkT) (*Handle, error) {
			return r.AllgatherAsync(mk(tensor.New(tensor.Float32, faultRows, 3)), "rows")
		}},
		{"broadcast", 1031, func(r *Runtime, mk mkT) (*Handle, error) {
			return r.BroadcastAsync(mk(vec(1031)), 0, "b")
		}},
		// Splits 1, 2, 1 rows of 5: 20 elements sent.
		{"alltoall", 20, func(r *Runtime, mk mkT) (*Handle, error) {
			return r.AlltoallAsync(mk(tensor.New(tensor.Float32, 4, 5)), []int{1, 2, 1}, "a2a")
		}},
		{"reducescatter", faultRows * 11, func(r *Runtime, mk mkT) (*Handle, error) {
			return r.ReducescatterAsync(mk(tensor.New(tensor.Float32, faultRows, 11)), "rs", Sum)
		}},
		{"barrier", -1, func(r *Runtime, mk mkT) (*Handle, error) {
			return r.control("Barrier", wire.Barrier, negotiate.BarrierName, nil)
		}},
	}
}

// faultChunk is the transport chunk size of the fault tests' runtimes.
const faultChunk = 1 << 20

// startFaultCluster runs n runtimes over one in-memory group whose members
// wrap wraps.
func startFaultCluster(t *testing.T, n int, wrap func(i int, c comm.Communicator) comm.Communicator) *cluster {
	t.Helper()
	return startFaultClusterOver(t, memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: 30 * time.Second}), wrap)
}

// startFaultClusterOver runs one runtime over each member of group, wrapped
// by wrap.
func startFaultClusterOver(t *testing.T, group []comm.Communicator, wrap func(i int, c comm.Communicator) comm.Communicator) *cluster {
	t.Helper()
	n := len(group)
	coms := make([]comm.Communicator, n)
	for i := range coms {
		coms[i] = wrap(i, group[i])
	}
	return startOver(t, coms, WithChunkBytes(faultChunk))
}

// startOver starts one runtime over each of coms, concurrently.
func startOver(t *testing.T, coms []comm.Communicator, opts ...Option) *cluster {
	t.Helper()
	n := len(coms)
	c := &cluster{rts: make([]*Runtime, n)}
	for i := range c.rts {
		c.rts[i] = new(Runtime)
	}
	errs := commtest.OnRanks(commtest.Ranks(n), func(i int) error {
		return c.rts[i].Init(append([]Option{WithCommunicator(coms[i]), WithConfig(testConfig()), WithLogger(zerolog.Nop())}, opts...)...)
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d init: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, r := range c.rts {
			r.Shutdown()
		}
	})
	return c
}

// TestTransportFaultEveryCollective is a past defect (a handle left
// waiting after a transport failure), for every
// collective kind, fused and not: the transport fails on rank 1 in the
// middle of the operation. Every rank's handle completes with an error that
// carries the cause (on the others: naming rank 1), later calls return the
// same root cause, nothing hangs, and no goroutine is left behind.
func TestTransportFaultEveryCollective(t *testing.T) {
	testTransportFault(t, func(n int) []comm.Communicator {
		return memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: 30 * time.Second})
	})
}

// TestTransportFaultEveryCollectiveEmbedded is the same over the embedded
// transport (real sockets, in this process): the failing rank's abort
// reaches the others as a *comm.PeerError naming it and carrying its cause.
func TestTransportFaultEveryCollectiveEmbedded(t *testing.T) {
	testTransportFault(t, func(n int) []comm.Communicator {
		g, err := embedded.NewLocalGroup(n, embedded.GroupOptions{Unix: true})
		if err != nil {
			t.Skip("embedded transport unavailable here:", err)
		}
		t.Cleanup(func() {
			for _, c := range g {
				c.Close()
			}
		})
		return g
	})
}

func testTransportFault(t *testing.T, group func(n int) []comm.Communicator) {
	const n = 3
	for _, fc := range faultCases() {
		t.Run(fc.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			injected := fmt.Errorf("injected transport failure in %s", fc.name)
			traps := make([]*trap, n)
			wrap := func(i int, c comm.Communicator) comm.Communicator {
				traps[i] = &trap{Communicator: c, magic: -2}
				if i == 1 {
					traps[i].magic, traps[i].barrier, traps[i].err = fc.magic, fc.magic < 0, injected
				}
				return traps[i]
			}
			g := group(n)
			c := startFaultClusterOver(t, g, wrap)
			hs := make([]*Handle, n)
			for rank, r := range c.rts {
				var err error
				if hs[rank], err = fc.run(r, func(t *tensor.Tensor) *tensor.Tensor { return t }); err != nil {
					t.Fatalf("rank %d: %v", rank, err)
				}
			}
			checkFaultErrors(t, c, hs, injected)
			for _, r := range c.rts {
				r.Shutdown()
			}
			for _, m := range g { // the runtime does not close what it was given
				m.Close()
			}
			if !traps[1].fired.Load() {
				t.Fatal("the fault was never injected")
			}
			waitGoroutines(t, base)
		})
	}
}

// waitGoroutines fails the test when, after a grace period, more goroutines
// run than base (the loops, timers and waiters of a stopped job are gone).
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the job:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPanicInsideACollective: the loop panics in the middle of an
// operation on rank 1 (after the cycle's agreement, so the ranks are out of
// step). The panic is recovered; rank 1's handles return the PanicError,
// the transport is aborted with it, and the other ranks' errors name rank 1
// and the panic. The process survives and nothing hangs.
func TestPanicInsideACollective(t *testing.T) {
	const n = 3
	base := runtime.NumGoroutine()
	traps := make([]*trap, n)
	c := startFaultCluster(t, n, func(i int, m comm.Communicator) comm.Communicator {
		traps[i] = &trap{Communicator: m, magic: -2}
		if i == 1 {
			traps[i].magic, traps[i].panics, traps[i].err = 777, true, errors.New("injected panic")
		}
		return traps[i]
	})
	hs := make([]*Handle, n)
	for rank, r := range c.rts {
		h, err := r.AllreduceAsync(fill(tensor.Float32, 777, 1), "p", Sum)
		if err != nil {
			t.Fatal(err)
		}
		hs[rank] = h
	}
	for rank, h := range hs {
		err := h.Wait(ctxT(t))
		if !strings.Contains(fmt.Sprint(err), "injected panic") {
			t.Fatalf("rank %d: %v, want the panic as the cause", rank, err)
		}
		if rank == 1 {
			if !errors.As(err, new(*PanicError)) {
				t.Fatalf("rank 1: %v is not a PanicError", err)
			}
		} else if r, _, ok := FailedRank(err); !ok || r != 1 {
			t.Fatalf("rank %d: %v does not name rank 1", rank, err)
		}
	}
	for _, r := range c.rts {
		r.Shutdown()
	}
	waitGoroutines(t, base)
}

// trainUntilError runs allreduce steps on r until one fails, and returns
// that error (nil if ctx ends first).
func trainUntilError(t *testing.T, r *Runtime, rank int) error {
	ctx := ctxT(t)
	for ctx.Err() == nil {
		v := fill(tensor.Float32, 64, float64(rank))
		if err := r.AllreduceInPlace(ctx, v, "w", Average); err != nil {
			return err
		}
	}
	return nil
}

// TestFaultWrapperUnderTraining: package fault's k-th-call rules under a
// training loop. Rank 2's 40th allreduce (agreement or data, whichever
// comes) fails and aborts the group: every rank's step returns, the others
// naming rank 2 and the injected error.
func TestFaultWrapperUnderTraining(t *testing.T) {
	const n = 3
	base := runtime.NumGoroutine()
	c := startFaultCluster(t, n, func(i int, m comm.Communicator) comm.Communicator {
		if i == 2 {
			return fault.Wrap(m, fault.Rule{Kind: fault.Allreduce, Call: 40, Abort: true})
		}
		return m
	})
	errs := make([]error, n)
	c.each(t, func(r *Runtime, rank int) error {
		errs[rank] = trainUntilError(t, r, rank)
		return nil
	})
	for rank, err := range errs {
		var fe *fault.Error
		if !errors.Is(err, ErrShutdown) || !errors.As(err, &fe) && rank == 2 {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if rank != 2 {
			if r, cause, ok := FailedRank(err); !ok || r != 2 || !strings.Contains(cause, "allreduce") {
				t.Fatalf("rank %d: %v does not name rank 2 and the fault", rank, err)
			}
		}
	}
	for _, r := range c.rts {
		r.Shutdown()
	}
	waitGoroutines(t, base)
}

// TestBlockedRankTimesOut: rank 1's transport blocks (a hung peer). With a
// transport timeout, nobody hangs: the other ranks' steps fail with the
// timeout naming rank 1 as missing, and rank 1's with the torn-down group.
func TestBlockedRankTimesOut(t *testing.T) {
	const n = 3
	base := runtime.NumGoroutine()
	group := memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: 300 * time.Millisecond})
	coms := make([]comm.Communicator, n)
	for i := range coms {
		coms[i] = group[i]
		if i == 1 {
			coms[i] = fault.Wrap(group[i], fault.Rule{Kind: fault.Allreduce, Call: 30, Block: true})
		}
	}
	c := startOver(t, coms)
	errs := make([]error, n)
	c.each(t, func(r *Runtime, rank int) error {
		errs[rank] = trainUntilError(t, r, rank)
		return nil
	})
	for rank, err := range errs {
		if !errors.Is(err, ErrShutdown) || !errors.Is(err, comm.ErrClosed) {
			t.Fatalf("rank %d: %v", rank, err)
		}
		var te *memcomm.TimeoutError
		if rank != 1 && (!errors.As(err, &te) || !slices.Contains(te.Missing, 1)) {
			t.Fatalf("rank %d: %v does not name rank 1 as missing", rank, err)
		}
	}
	for _, r := range c.rts {
		r.Shutdown()
	}
	waitGoroutines(t, base)
}

// checkFaultErrors asserts what every rank sees after the transport failed
// on rank 1 under the operations hs: each handle fails, rank 1's with the
// injected error, the others' naming rank 1 and its cause, and a later
// call returns the same root cause.
func checkFaultErrors(t *testing.T, c *cluster, hs []*Handle, injected error) {
	t.Helper()
	for rank, h := range hs {
		err := h.Wait(ctxT(t))
		if err == nil {
			t.Fatalf("rank %d: the operation succeeded", rank)
		}
		if rank == 1 {
			if !errors.Is(err, injected) {
				t.Fatalf("rank 1: %v does not wrap the transport's error", err)
			}
		} else if r, cause, ok := FailedRank(err); !ok || r != 1 || !strings.Contains(cause, "injected") {
			t.Fatalf("rank %d: %v does not name rank 1 and its cause (%d %q %v)", rank, err, r, cause, ok)
		}
		_, later := c.rts[rank].AllreduceAsync(fill(tensor.Float32, 1, 1), "later", Sum)
		if !errors.Is(later, ErrShutdown) || !strings.Contains(later.Error(), "injected") {
			t.Fatalf("rank %d: a later call returned %v, want the root cause", rank, later)
		}
	}
}
