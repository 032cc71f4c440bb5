package optim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// startRuntimes runs n Runtimes over one in-memory group.
func startRuntimes(t *testing.T, n int) []*hvd.Runtime {
	t.Helper()
	group := comm.NewGroupWith(n, comm.GroupOptions{Timeout: 30 * time.Second})
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	rts := make([]*hvd.Runtime, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		rts[i] = new(hvd.Runtime)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rts[i].Init(hvd.WithCommunicator(group[i]), hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Init: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, r := range rts {
			r.Shutdown()
		}
		group[0].Close()
	})
	return rts
}

// equivalenceRun trains the linear model for steps on rank's share of each
// global batch through coll, and returns the final weights; with coll nil
// it trains one process on the whole batch.
func equivalenceRun(ctx context.Context, coll Collectives, rank, size, steps int) ([]float64, error) {
	return equivalenceRunWith(ctx, coll, rank, size, steps)
}

// equivalenceRunWith is equivalenceRun with DistributedOptimizer options.
func equivalenceRunWith(ctx context.Context, coll Collectives, rank, size, steps int, opts ...DistOption) ([]float64, error) {
	const d, batch = 6, 24
	m := newLinear(d, uint64(rank)+1)
	var opt Optimizer
	var err error
	if opt, err = NewSGD(m.params, SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3}); err != nil {
		return nil, err
	}
	ready := noReady
	if coll != nil {
		if err := BroadcastParameters(ctx, coll, m.params, 0); err != nil {
			return nil, err
		}
		dist, err := NewDistributed(opt, coll, opts...)
		if err != nil {
			return nil, err
		}
		opt, ready = dist, dist.Ready
	}
	per := batch / size
	for s := range steps {
		r := rand.New(rand.NewPCG(uint64(s), 11))
		xs, ys := make([]float64, batch*d), make([]float64, batch)
		for i := range xs {
			xs[i] = r.NormFloat64()
		}
		for i := range ys {
			ys[i] = r.NormFloat64() + 2*xs[i*d]
		}
		if err := opt.ZeroGrad(); err != nil {
			return nil, err
		}
		if err := m.backward(xs[rank*per*d:(rank+1)*per*d], ys[rank*per:(rank+1)*per], ready); err != nil {
			return nil, err
		}
		if err := opt.Step(); err != nil {
			return nil, err
		}
	}
	return append(m.w, m.b...), nil
}

func closeTo(got, want []float64, tol float64) error {
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol*math.Max(1, math.Abs(want[i])) {
			return fmt.Errorf("parameter %d: %.17g, single process %.17g", i, got[i], want[i])
		}
	}
	return nil
}

// TestRuntimeEquivalence is TestEquivalence over the real runtime (in-memory
// communicator): negotiation, fusion and the Average op included.
func TestRuntimeEquivalence(t *testing.T) {
	const steps = 40
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts := startRuntimes(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			onRanks(t, n, func(rank int) error {
				coll, err := FromRuntime(rts[rank])
				if err != nil {
					return err
				}
				got, err := equivalenceRun(ctx, coll, rank, n, steps)
				if err != nil {
					return err
				}
				return closeTo(got, want, 1e-12)
			})
		})
	}
}

// TestRuntimePredivide checks that the predivide factor reaches the runtime
// as pre- and postscale and still averages.
func TestRuntimePredivide(t *testing.T) {
	rts := startRuntimes(t, 2)
	onRanks(t, 2, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		m := newLinear(2, 1)
		inner, _ := NewSGD(m.params, SGDConfig{LR: 0.1})
		opt, err := NewDistributed(inner, coll, GradientPredivideFactor(4))
		if err != nil {
			return err
		}
		copy(m.gw, []float64{1 + 2*float64(rank), 2 + 2*float64(rank)})
		if err := opt.Ready(m.params[0]); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := opt.Synchronize(ctx); err != nil {
			return err
		}
		return closeTo(m.gw, []float64{2, 3}, 1e-15)
	})
}
