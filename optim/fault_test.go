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
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestStepReturnsOnTransportFailure: the transport fails on rank 1 in the
// middle of training (its 60th allreduce, aborting the group). Step, which
// waits without a deadline, returns on every rank with an error, the
// others' naming rank 1: the DistributedOptimizer never hangs on a failed
// reduction.
func TestStepReturnsOnTransportFailure(t *testing.T) {
	const n = 3
	checkFaultEnds(t, n, fault.Rule{Kind: fault.Allreduce, Call: 60, Abort: true}, func(coll Collectives, rank int) error {
		// Far more steps than the fault allows: the run must end with
		// the fault's error.
		_, err := equivalenceRun(context.Background(), coll, rank, n, 100000)
		return err
	})
}

// checkFaultEnds runs train on n ranks of runtimes whose rank 1's
// transport fails by rule (which must abort the group), and checks that
// every rank's train returns within 30 s with ErrShutdown, rank 1's
// carrying the injected error and the others' naming rank 1.
func checkFaultEnds(t *testing.T, n int, rule fault.Rule, train func(coll Collectives, rank int) error) {
	t.Helper()
	rts := startFaulty(t, n, 1, rule)
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
				if err == nil {
					err = train(coll, rank)
				}
				errs[rank] = err
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("training did not return after the transport failed")
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

// TestAlgorithmsEndOnTransportFailure: ByteGrad (its alltoall or its
// allgather failing), QAdam after its warm-up, and Zero (stage 1's
// allgather, stage 2's alltoall) return on every rank when rank 1's
// transport fails mid-training, the others naming rank 1.
func TestAlgorithmsEndOnTransportFailure(t *testing.T) {
	const n = 3
	forever := func(run func(coll Collectives, rank, steps int) error) func(Collectives, int) error {
		return func(coll Collectives, rank int) error { return run(coll, rank, 1<<30) }
	}
	byteGrad := forever(func(coll Collectives, rank, steps int) error {
		return byteGradRun(context.Background(), coll, rank, steps, true, nil)
	})
	qadam := forever(func(coll Collectives, rank, steps int) error {
		_, err := qadamRun(context.Background(), coll, rank, steps)
		return err
	})
	zero := func(stage int) func(Collectives, int) error {
		return forever(func(coll Collectives, rank, steps int) error {
			z, err := NewZero(zeroParams(tensor.Float32), coll, zeroInners[1].make, ZeroConfig{Stage: stage})
			if err != nil {
				return err
			}
			return zeroSteps(z, rank, 0, steps)
		})
	}
	for _, c := range []struct {
		name  string
		rule  fault.Rule
		train func(Collectives, int) error
	}{
		{"bytegrad-alltoall", fault.Rule{Kind: fault.Alltoallv, Call: 5, Abort: true}, byteGrad},
		{"bytegrad-allgather", fault.Rule{Kind: fault.Allgatherv, Call: 9, Abort: true}, byteGrad},
		{"qadam", fault.Rule{Kind: fault.Alltoallv, Call: 4, Abort: true}, qadam},
		{"zero1", fault.Rule{Kind: fault.Allgatherv, Call: 30, Abort: true}, zero(1)},
		{"zero2", fault.Rule{Kind: fault.Alltoallv, Call: 9, Abort: true}, zero(2)},
	} {
		t.Run(c.name, func(t *testing.T) { checkFaultEnds(t, n, c.rule, c.train) })
	}
}

// startFaulty starts n runtimes over one in-memory group, rank victim's
// communicator wrapped with rules; StopLocal stops them.
func startFaulty(t *testing.T, n, victim int, rules ...fault.Rule) []*hvd.Runtime {
	t.Helper()
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	group := memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: time.Minute})
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
