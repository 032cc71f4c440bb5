package optim

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm/fault"
)

// TestWeightAlgorithmsFail: the transport fails on rank 1 in the middle of
// an exchange (or an allreduce, for the algorithms that average with one),
// aborting the group: every rank's training returns within the bound, with
// an error that, on the other ranks, names rank 1. Nothing hangs.
func TestWeightAlgorithmsFail(t *testing.T) {
	const n, steps = 4, 100000
	for _, c := range []struct {
		name string
		kind fault.Kind
		run  func(ctx context.Context, coll Collectives, rank int) error
	}{
		{"decentralized/shift_one", fault.Exchange, func(ctx context.Context, coll Collectives, rank int) error {
			_, err := decentralizedRun(ctx, coll, rank, n, steps, DecentralizedConfig{PeerSelection: PeerShiftOne, CommunicationInterval: 1})
			return err
		}},
		{"low_precision", fault.Exchange, func(ctx context.Context, coll Collectives, rank int) error {
			_, err := lowPrecisionRun(ctx, coll, rank, n, steps, 1)
			return err
		}},
		{"async", fault.Allreduce, func(ctx context.Context, coll Collectives, rank int) error {
			_, err := asyncRun(ctx, coll, rank, n, asyncPlan{steps: steps, abortAt: -1, resumeAt: -1})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rts := startFaulty(t, n, 1, fault.Rule{Kind: c.kind, Call: 40, Abort: true})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := make([]error, n)
			onRanks(t, n, func(rank int) error {
				coll, err := FromRuntime(rts[rank])
				if err == nil {
					errs[rank] = c.run(ctx, coll, rank)
				}
				return err
			})
			for rank, err := range errs {
				if err := failedFrom(rank, err); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// failedFrom checks that rank's error is the runtime's shutdown caused by
// rank 1's injected fault, and not a wait that ran out.
func failedFrom(rank int, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, hvd.ErrShutdown):
		return fmt.Errorf("rank %d: %v, want ErrShutdown with the cause", rank, err)
	case rank == 1 && !errors.As(err, new(*fault.Error)):
		return fmt.Errorf("rank 1: %v does not carry the injected error", err)
	case rank != 1:
		if r, _, ok := hvd.FailedRank(err); !ok || r != 1 {
			return fmt.Errorf("rank %d: %v does not name rank 1", rank, err)
		}
	}
	return nil
}
