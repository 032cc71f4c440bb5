package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// startRuntimes runs n Runtimes over one in-memory group, with the
// options extra (hvd.WithDynamicProcessSets()) besides a cycle of 1 ms;
// they stop at the test's end.
func startRuntimes(t testing.TB, n int, extra ...hvd.Option) []*hvd.Runtime {
	t.Helper()
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	rts, err := hvd.StartLocal(n, append([]hvd.Option{hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop())}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hvd.StopLocal(rts) })
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
	return trainLinear(ctx, coll, rank, size, steps, true, opts...)
}

// trainLinear is equivalenceRunWith, whose backward reports each gradient
// Ready when report is set and never otherwise (Step then reduces them
// all).
func trainLinear(ctx context.Context, coll Collectives, rank, size, steps int, report bool, opts ...DistOption) ([]float64, error) {
	return trainModel(ctx, newLinear(6, uint64(rank)+1), coll, rank, size, steps, report, opts...)
}

// trainModel trains m (of 6 weights) for steps on rank's share of each
// global batch of 24 through coll, reporting each gradient Ready when
// report is set, and returns the final weights; with coll nil it trains
// one process on the whole batch.
func trainModel(ctx context.Context, m *linear, coll Collectives, rank, size, steps int, report bool, opts ...DistOption) ([]float64, error) {
	const d, batch = 6, 24
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
		defer dist.Close() // the runtime may serve later optimizers over the same names
		opt = dist
		if report {
			ready = dist.Ready
		}
	}
	per := batch / size
	for s := range steps {
		xs, ys := linearBatch(s, d, batch)
		if err := opt.ZeroGrad(); err != nil {
			return nil, err
		}
		if err := m.backward(xs[rank*per*d:(rank+1)*per*d], ys[rank*per:(rank+1)*per], ready); err != nil {
			return nil, err
		}
		if err := opt.Step(); err != nil {
			return nil, fmt.Errorf("step %d: %w", s, err)
		}
	}
	return append(slices.Clone(m.w), m.b...), nil
}

// checkRuntimeEquivalence trains the linear model on n runtimes with opts
// and compares every rank's parameters with want (a single process's).
func checkRuntimeEquivalence(t *testing.T, n, steps int, want []float64, tol float64, opts ...DistOption) {
	t.Helper()
	checkEquivalenceOn(t, startRuntimes(t, n), steps, want, tol, opts...)
}

// checkEquivalenceOn is checkRuntimeEquivalence on the given runtimes.
func checkEquivalenceOn(t *testing.T, rts []*hvd.Runtime, steps int, want []float64, tol float64, opts ...DistOption) {
	t.Helper()
	n := len(rts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	onRanks(t, n, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		got, err := equivalenceRunWith(ctx, coll, rank, n, steps, opts...)
		if err != nil {
			return err
		}
		return closeTo(got, want, tol)
	})
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
			checkRuntimeEquivalence(t, n, steps, want, 1e-12)
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
		copy(m.gw(), []float64{1 + 2*float64(rank), 2 + 2*float64(rank)})
		if err := opt.Ready(m.params[0]); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := opt.Synchronize(ctx); err != nil {
			return err
		}
		return closeTo(m.gw(), []float64{2, 3}, 1e-15)
	})
}

// TestRuntimeGroupsAndCompression: the equivalence run over the real
// runtime with parameter groups (grouped allreduce) matches one process
// tightly, and with half-precision gradients closely.
func TestRuntimeGroupsAndCompression(t *testing.T) {
	const steps = 30
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		opts []DistOption
		tol  float64
	}{
		{"one group", []DistOption{NumGroups(1)}, 1e-12},
		{"explicit group", []DistOption{Groups([]string{"b", "w"})}, 1e-12},
		{"fp16", []DistOption{WithCompression(FP16)}, 0.02},
		{"bf16 grouped", []DistOption{WithCompression(BF16), NumGroups(1)}, 0.05},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkRuntimeEquivalence(t, 2, steps, want, c.tol, c.opts...)
		})
	}
}

// adasumRun reduces, with op Adasum on rank's runtime, one gradient that
// is the rank's unit vector (orthogonal across ranks: Adasum adds them) and
// one that is the same on every rank (parallel: Adasum keeps it), and
// returns both after Step with learning rate 1 from zero parameters.
func adasumRun(ctx context.Context, coll Collectives, rank, size int) ([]float64, []float64, error) {
	ps := []Param{
		{Name: "orth", Value: tensor.New(tensor.Float64, size), Grad: tensor.New(tensor.Float64, size)},
		{Name: "same", Value: tensor.New(tensor.Float32, 3), Grad: tensor.FromFloat32([]float32{2, -1, 0.5})},
	}
	ps[0].Grad.Float64s()[rank] = 1
	inner, err := NewSGD(ps, SGDConfig{LR: 1})
	if err != nil {
		return nil, nil, err
	}
	opt, err := NewDistributed(inner, coll, WithOp(Adasum))
	if err != nil {
		return nil, nil, err
	}
	defer opt.Close()
	for _, p := range ps {
		if err := opt.Ready(p); err != nil {
			return nil, nil, err
		}
	}
	if err := opt.StepContext(ctx); err != nil {
		return nil, nil, err
	}
	return ps[0].Grad.Float64s(), asFloat64s(ps[1].Grad), nil
}

// TestRuntimeAdasum: op Adasum reaches the runtime's Adasum allreduce:
// orthogonal gradients add up (Average would halve them), parallel ones
// stay (Sum would double them).
func TestRuntimeAdasum(t *testing.T) {
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
				orth, same, err := adasumRun(ctx, coll, rank, n)
				if err != nil {
					return err
				}
				ones := make([]float64, n)
				for i := range ones {
					ones[i] = 1
				}
				if err := closeTo(orth, ones, 1e-12); err != nil {
					return fmt.Errorf("orthogonal: %v", err)
				}
				return closeTo(same, []float64{2, -1, 0.5}, 1e-6)
			})
		})
	}
}

// TestWithoutReady: the same training with and without Ready calls ends
// with identical parameters, at np 1, 2 and 4, over the test group and
// over the runtime: Ready only overlaps communication with backward, and
// a program that forgets it still trains.
func TestWithoutReady(t *testing.T) {
	const steps = 12
	colls := []struct {
		name string
		make func(t *testing.T, n int) []Collectives
	}{
		{"group", func(t *testing.T, n int) []Collectives {
			g := newGroup(n)
			cs := make([]Collectives, n)
			for r := range cs {
				cs[r] = member{g, r}
			}
			return cs
		}},
		{"runtime", func(t *testing.T, n int) []Collectives {
			rts := startRuntimes(t, n)
			cs := make([]Collectives, n)
			for r, rt := range rts {
				c, err := FromRuntime(rt)
				if err != nil {
					t.Fatal(err)
				}
				cs[r] = c
			}
			return cs
		}},
	}
	for _, c := range colls {
		for _, n := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", c.name, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var got [2][][]float64
				for k, report := range []bool{true, false} {
					cs := c.make(t, n)
					got[k] = make([][]float64, n)
					onRanks(t, n, func(rank int) error {
						p, err := trainLinear(ctx, cs[rank], rank, n, steps, report)
						got[k][rank] = p
						return err
					})
				}
				start := newLinear(6, 1)
				for rank := range n {
					with, without := got[0][rank], got[1][rank]
					if !slices.Equal(with, without) {
						t.Fatalf("rank %d: with Ready %v, without %v", rank, with, without)
					}
					if slices.Equal(without[:len(start.w)], start.w) {
						t.Fatalf("rank %d: without Ready the parameters did not move", rank)
					}
				}
			})
		}
	}
}

// TestRuntimeEquivalenceEmbedded is TestRuntimeEquivalence over the
// embedded transport (real sockets between ranks in this process), on the
// default bucketed path and with the gradients moved into a flat buffer
// (FlatGradients(true)): training gives the single process's parameters.
func TestRuntimeEquivalenceEmbedded(t *testing.T) {
	const steps = 20
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts := startEmbedded(t, n)
			checkEquivalenceOn(t, rts, steps, want, 1e-12)
			checkEquivalenceOn(t, rts, steps, want, 1e-12, FlatGradients(true))
		})
	}
}

// paritySets adds, on every rank of r, the process sets of the even and
// of the odd ranks, and returns the Collectives of this rank's set, the
// set, and the other one.
func paritySets(ctx context.Context, r *hvd.Runtime) (Collectives, *hvd.ProcessSet, *hvd.ProcessSet, error) {
	added := make([]*hvd.ProcessSet, 2)
	for g := range 2 {
		var rs []int
		for k := g; k < r.Size(); k += 2 {
			rs = append(rs, k)
		}
		ps, err := r.AddProcessSet(ctx, rs)
		if err != nil {
			return nil, nil, nil, err
		}
		added[g] = ps
	}
	mine := added[r.Rank()%2]
	coll, err := FromProcessSet(r, mine)
	if err != nil {
		return nil, nil, nil, err
	}
	if coll.(Ranker).Rank() != mine.Rank() || coll.Size() != len(mine.Ranks()) {
		return nil, nil, nil, fmt.Errorf("rank %d size %d in %v", coll.(Ranker).Rank(), coll.Size(), mine)
	}
	return coll, mine, added[1-r.Rank()%2], nil
}

// setsEquivalence trains the linear model in two disjoint process sets at
// once (the even and the odd ranks, with the same parameter names), each
// set on its own replica of the global batch: each must end where one
// process on the whole batch ends, which it does only if its gradients are
// averaged over its own members and no others. Then the object helpers run
// within each set.
func setsEquivalence(ctx context.Context, r *hvd.Runtime, steps int, want []float64) error {
	coll, mine, other, err := paritySets(ctx, r)
	if err != nil {
		return err
	}
	got, err := equivalenceRun(ctx, coll, mine.Rank(), mine.Size(), steps)
	if err != nil {
		return err
	}
	if err := closeTo(got, want, 1e-12); err != nil {
		return err
	}
	if err := objectChecks(ctx, coll.(GatherCollectives), mine.Rank(), mine.Size()); err != nil {
		return fmt.Errorf("objects within %v: %w", mine, err)
	}
	if _, err := FromProcessSet(r, other); !errors.Is(err, hvd.ErrForeignProcessSet) {
		return fmt.Errorf("FromProcessSet of a foreign set: %v", err)
	}
	// Adasum within a set other than the global one is refused when the
	// optimizer is made, as Horovod does; over the global set it is not.
	inner, err := NewSGD([]Param{{Name: "w", Value: tensor.New(tensor.Float32, 2), Grad: tensor.New(tensor.Float32, 2)}}, SGDConfig{LR: 0.1})
	if err != nil {
		return err
	}
	if _, err := NewDistributed(inner, coll, WithOp(Adasum)); !errors.Is(err, hvd.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), hvd.AdasumProcessSetText) {
		return fmt.Errorf("Adasum DistributedOptimizer within %v: %v", mine, err)
	}
	global, err := FromProcessSet(r, r.GlobalProcessSet())
	if err != nil {
		return err
	}
	if size := r.Size(); size&(size-1) == 0 { // Adasum needs a power of two ranks
		d, err := NewDistributed(inner, global, WithOp(Adasum))
		if err != nil {
			return fmt.Errorf("Adasum DistributedOptimizer over the global set: %w", err)
		}
		d.Close()
	}
	return removeSets(ctx, r, mine, other)
}

// removeSets removes the process sets of paritySets, on every rank in
// the same order (the even ranks' first).
func removeSets(ctx context.Context, r *hvd.Runtime, mine, other *hvd.ProcessSet) error {
	sets := []*hvd.ProcessSet{mine, other}
	if r.Rank()%2 == 1 {
		sets[0], sets[1] = other, mine
	}
	for _, ps := range sets {
		if err := r.RemoveProcessSet(ctx, ps); err != nil {
			return err
		}
	}
	return nil
}

func TestRuntimeEquivalenceProcessSets(t *testing.T) {
	const steps = 20
	want, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts := startRuntimes(t, n, hvd.WithDynamicProcessSets())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			onRanks(t, n, func(rank int) error { return setsEquivalence(ctx, rts[rank], steps, want) })
		})
	}
}
