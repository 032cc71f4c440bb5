package optim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/fault"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// TestStepReturnsOnTransportFailure: the transport fails on rank 1 in the
// middle of training (its 60th allreduce, aborting the group). Step, which
// waits without a deadline, returns on every rank with an error, the
// others' naming rank 1: the DistributedOptimizer never hangs on a failed
// reduction.
func TestStepReturnsOnTransportFailure(t *testing.T) {
	const n = 3
	rts := startFaulty(t, n, 1, fault.Rule{Kind: fault.Allreduce, Call: 60, Abort: true})
	done := make(chan struct{})
	errs := make([]error, n)
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for rank := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				coll, err := FromRuntime(rts[rank])
				if err != nil {
					errs[rank] = err
					return
				}
				// Far more steps than the fault allows: the run must end
				// with the fault's error.
				_, errs[rank] = equivalenceRun(context.Background(), coll, rank, n, 100000)
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Step did not return after the transport failed")
	}
	for rank, err := range errs {
		if !errors.Is(err, hvd.ErrShutdown) {
			t.Fatalf("rank %d: %v, want ErrShutdown with the cause", rank, err)
		}
		if rank != 1 {
			if r, _, ok := hvd.FailedRank(err); !ok || r != 1 {
				t.Fatalf("rank %d: %v does not name rank 1", rank, err)
			}
		} else if !errors.As(err, new(*fault.Error)) {
			t.Fatalf("rank 1: %v does not carry the injected error", err)
		}
	}
}

// startFaulty starts n runtimes over one in-memory group, rank victim's
// communicator wrapped with rules; StopLocal stops them.
func startFaulty(t *testing.T, n, victim int, rules ...fault.Rule) []*hvd.Runtime {
	t.Helper()
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	group := comm.NewGroupWith(n, comm.GroupOptions{Timeout: time.Minute})
	rts := make([]*hvd.Runtime, n)
	var wg sync.WaitGroup
	for i := range rts {
		rts[i] = new(hvd.Runtime)
		var c comm.Communicator = group[i]
		if i == victim {
			c = fault.Wrap(c, rules...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rts[i].Init(hvd.WithCommunicator(c), hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop())); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() { hvd.StopLocal(rts) })
	return rts
}

// TestAllgatherObjectThenJoin: AllgatherObject twice (the second from the
// response cache), then Join on every rank (a defect once: the cached
// allgathers were replayed when every rank had joined, and the runtime
// stopped). Join returns the same last rank everywhere and the job goes on.
func TestAllgatherObjectThenJoin(t *testing.T) {
	for _, n := range []int{2, 3} {
		rts := startRuntimes(t, n)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		lasts := make([]int, n)
		onRanks(t, n, func(rank int) error {
			coll, err := FromRuntime(rts[rank])
			if err != nil {
				return err
			}
			gc := coll.(GatherCollectives)
			for range 2 {
				got, err := AllgatherObject(ctx, gc, map[string]int{"rank": rank}, "meta")
				if err != nil {
					return err
				}
				if len(got) != n || got[n-1]["rank"] != n-1 {
					return fmt.Errorf("gathered %v", got)
				}
			}
			if lasts[rank], err = rts[rank].Join(ctx); err != nil {
				return fmt.Errorf("join: %w", err)
			}
			_, err = AllgatherObject(ctx, gc, rank, "after")
			return err
		})
		for r := range lasts {
			if lasts[r] != lasts[0] || lasts[r] < 0 {
				t.Fatalf("np %d: Join returned %v", n, lasts)
			}
		}
	}
}
