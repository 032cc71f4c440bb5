package nn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// startRuntimes runs n Runtimes over one in-memory group.
func startRuntimes(t testing.TB, n int, opts ...hvd.Option) []*hvd.Runtime {
	t.Helper()
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	rts, err := hvd.StartLocal(n, append([]hvd.Option{hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hvd.StopLocal(rts) })
	return rts
}

// onRanks runs f on every runtime, each in its own goroutine, with a
// deadline, and returns the ranks' errors.
func onRanks(rts []*hvd.Runtime, f func(ctx context.Context, r *hvd.Runtime, rank int) error) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return commtest.OnRanks(commtest.Ranks(len(rts)), func(i int) error { return f(ctx, rts[i], i) })
}

func fatalErrs(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// The per-rank row counts of the sync tests: even, uneven, and with an
// empty rank.
var countCases = map[int][][]int{
	2: {{4, 4}, {3, 8}, {0, 6}, {7, 0}},
	3: {{3, 3, 3}, {1, 5, 9}, {4, 0, 2}},
	4: {{2, 2, 2, 2}, {1, 6, 0, 3}, {0, 0, 5, 1}},
}

// TestSyncBatchNorm: at np 2, 3 and 4, with even, uneven and empty
// batches, a sync layer's output, dx, summed weight and bias gradients,
// running statistics (over three steps, the same collective names each
// step) and evaluation output equal single-process batch normalisation of
// the concatenated batch: to 1e-9 relative in float64, 1e-6 in float32.
func TestSyncBatchNorm(t *testing.T) {
	for _, np := range []int{2, 3, 4} {
		t.Run(fmt.Sprint("np", np), func(t *testing.T) {
			rts := startRuntimes(t, np)
			for k, counts := range countCases[np] {
				errs := onRanks(rts, func(ctx context.Context, r *hvd.Runtime, rank int) error {
					coll, err := optim.FromRuntime(r)
					if err != nil {
						return err
					}
					if err := syncCheck[float64](ctx, coll, fmt.Sprint("bn64.", k), rank, counts, 3, uint64(k)); err != nil {
						return fmt.Errorf("float64 %v: %w", counts, err)
					}
					if err := syncCheck[float32](ctx, coll, fmt.Sprint("bn32.", k), rank, counts, 3, uint64(k)); err != nil {
						return fmt.Errorf("float32 %v: %w", counts, err)
					}
					return nil
				})
				fatalErrs(t, errs)
			}
		})
	}
}

// TestLocalBatchNorm: a local layer is the reference on its own batch
// (float64 to 1e-9, float32 to 1e-6), and its running statistics follow
// PyTorch's formulas; syncCheck on one rank without Collectives would not
// cover the local path, so this drives it directly.
func TestLocalBatchNorm(t *testing.T) {
	t.Run("float64", func(t *testing.T) { localCheck[float64](t) })
	t.Run("float32", func(t *testing.T) { localCheck[float32](t) })
}

func localCheck[T Float](t *testing.T) {
	const n, c = 9, 4
	bn, err := NewBatchNorm[T]("bn", c)
	if err != nil {
		t.Fatal(err)
	}
	tol := tolOf[T]()
	rm, rv := make([]float64, c), []float64{1, 1, 1, 1}
	for s := range 3 {
		x, dy, w, b := batch(7, s, n, c)
		copy(tensor.View[T](bn.weight.Value), convert[T](w))
		copy(tensor.View[T](bn.bias.Value), convert[T](b))
		xt := convert[T](x)
		want := refForward(convert[float64](xt), n, c, w, b, DefaultEps)
		dx, dw, db := want.backward(dy, w)
		optim.ZeroGrads(bn.Params())
		y, err := bn.Forward(xt, n)
		if err != nil {
			t.Fatal(err)
		}
		gx, err := bn.Backward(convert[T](dy))
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range []error{
			closeTo("y", y, want.y, tol), closeTo("dx", gx, dx, tol),
			closeTo("dweight", tensor.View[T](bn.weight.Grad), dw, tol),
			closeTo("dbias", tensor.View[T](bn.bias.Grad), db, tol),
		} {
			if err != nil {
				t.Fatalf("step %d: %v", s, err)
			}
		}
		for j := range c {
			rm[j] = 0.9*rm[j] + 0.1*want.mean[j]
			rv[j] = 0.9*rv[j] + 0.1*want.vb[j]*float64(n)/float64(n-1)
		}
	}
	if err := closeTo("running mean", bn.RunningMean(), rm, tol); err != nil {
		t.Fatal(err)
	}
	if err := closeTo("running var", bn.RunningVar(), rv, tol); err != nil {
		t.Fatal(err)
	}
	// Gradients accumulate until zeroed.
	x, dy, _, _ := batch(7, 2, n, c)
	before := convert[float64](tensor.View[T](bn.bias.Grad))
	if _, err := bn.Forward(convert[T](x), n); err != nil {
		t.Fatal(err)
	}
	if _, err := bn.Backward(convert[T](dy)); err != nil {
		t.Fatal(err)
	}
	for j, g := range tensor.View[T](bn.bias.Grad) {
		if d := math.Abs(float64(g) - 2*before[j]); d > tol*max(1, math.Abs(before[j])) {
			t.Fatalf("dbias[%d] = %v after two identical passes, want %v", j, g, 2*before[j])
		}
	}
}

// TestBatchNormGradient checks the reference's backward (and so the
// layer's) against central finite differences of the loss Σ dy·y with
// respect to x, weight and bias.
func TestBatchNormGradient(t *testing.T) {
	const n, c, h = 6, 3, 1e-6
	x, dy, _, _ := batch(3, 0, n, c)
	bn, err := NewBatchNorm[float64]("bn", c)
	if err != nil {
		t.Fatal(err)
	}
	w, b := bn.weight.Value.Float64s(), bn.bias.Value.Float64s()
	w[0], w[1], b[2] = 1.5, 0.7, -0.3
	loss := func() float64 {
		y, err := bn.Forward(x, n)
		if err != nil {
			t.Fatal(err)
		}
		var l float64
		for i, v := range y {
			l += v * dy[i]
		}
		return l
	}
	loss()
	gx, err := bn.Backward(dy)
	if err != nil {
		t.Fatal(err)
	}
	gx = append([]float64(nil), gx...)
	numeric := func(v []float64, i int) float64 {
		old := v[i]
		v[i] = old + h
		up := loss()
		v[i] = old - h
		down := loss()
		v[i] = old
		return (up - down) / (2 * h)
	}
	for _, c := range []struct {
		name     string
		v, grads []float64
	}{{"x", x, gx}, {"weight", w, bn.weight.Grad.Float64s()}, {"bias", b, bn.bias.Grad.Float64s()}} {
		for i := range c.v {
			if num := numeric(c.v, i); math.Abs(num-c.grads[i]) > 1e-6*max(1, math.Abs(num)) {
				t.Errorf("d/d%s[%d] = %.9g, finite differences %.9g", c.name, i, c.grads[i], num)
			}
		}
	}
}

// TestEvalMode: evaluation normalises with the running statistics, leaves
// them alone, backpropagates weight/sqrt(running_var+eps)·dy, and a sync
// layer in evaluation mode does not communicate (its Collectives here
// fail every call).
func TestEvalMode(t *testing.T) {
	bn, err := NewBatchNorm[float64]("bn", 2, Sync(failing{}))
	if err != nil {
		t.Fatal(err)
	}
	copy(bn.RunningMean(), []float64{1, -2})
	copy(bn.RunningVar(), []float64{4, 0.25})
	copy(bn.weight.Value.Float64s(), []float64{2, 3})
	copy(bn.bias.Value.Float64s(), []float64{0.5, 0})
	bn.SetTraining(false)
	if bn.Training() {
		t.Fatal("Training() after SetTraining(false)")
	}
	y, err := bn.Forward([]float64{3, -2, 1, -1.5}, 2)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := math.Sqrt(4+DefaultEps), math.Sqrt(0.25+DefaultEps)
	if err := closeTo("y", y, []float64{2*2/s0 + 0.5, 0, 0.5, 3 * 0.5 / s1}, 1e-12); err != nil {
		t.Fatal(err)
	}
	dx, err := bn.Backward([]float64{1, 1, -1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := closeTo("dx", dx, []float64{2 / s0, 3 / s1, -2 / s0, 6 / s1}, 1e-12); err != nil {
		t.Fatal(err)
	}
	if err := closeTo("dweight", bn.weight.Grad.Float64s(), []float64{2/s0 - 0, 0 + 2*0.5/s1}, 1e-12); err != nil {
		t.Fatal(err)
	}
	if err := closeTo("running", append(bn.RunningMean(), bn.RunningVar()...), []float64{1, -2, 4, 0.25}, 0); err != nil {
		t.Fatal(err)
	}
	// Back to training: the failing Collectives now surfaces, as an error.
	bn.SetTraining(true)
	if _, err := bn.Forward([]float64{3, -2, 1, -1.5}, 2); !errors.Is(err, ErrCollective) || !errors.Is(err, errFailing) {
		t.Fatalf("training Forward on failing collectives: %v", err)
	}
	if _, err := bn.Backward([]float64{1, 1, -1, 2}); !errors.Is(err, ErrNoForward) {
		t.Fatalf("Backward after a failed Forward: %v", err)
	}
}

var errFailing = errors.New("test: collective refused")

// failing is a Collectives whose every call fails.
type failing struct{}

func (failing) Size() int { return 2 }
func (failing) AllreduceAsync(*tensor.Tensor, string, tensor.ReduceOp, float64, float64) (optim.Waiter, error) {
	return nil, errFailing
}
func (failing) BroadcastAsync(*tensor.Tensor, int, string) (optim.Waiter, error) {
	return nil, errFailing
}

// TestConfigErrors: constructors refuse what cannot work.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		c    int
		opts []Option
	}{
		{"", 3, nil},
		{"bn", 0, nil},
		{"bn", -1, nil},
		{"bn", 3, []Option{Eps(0)}},
		{"bn", 3, []Option{Eps(math.NaN())}},
		{"bn", 3, []Option{Momentum(-0.1)}},
		{"bn", 3, []Option{Momentum(1.5)}},
	} {
		if _, err := NewBatchNorm[float32](c.name, c.c, c.opts...); !errors.Is(err, ErrConfig) {
			t.Errorf("NewBatchNorm(%q, %d, ...): %v, want ErrConfig", c.name, c.c, err)
		}
	}
	bn, err := NewBatchNorm[float32]("bn", 3, Eps(1e-3), Momentum(1))
	if err != nil || bn.Name() != "bn" || bn.Features() != 3 || bn.Synced() || len(bn.Params()) != 2 ||
		bn.Params()[0].Name != "bn.weight" || bn.Params()[1].Name != "bn.bias" {
		t.Fatalf("NewBatchNorm: %v, %+v", err, bn)
	}
	if err := optim.CheckParams(bn.Params()); err != nil {
		t.Fatal(err)
	}
}

// TestInputErrors: bad input is an error, locally; a single row cannot be
// normalised in training.
func TestInputErrors(t *testing.T) {
	bn, err := NewBatchNorm[float64]("bn", 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bn.Backward(make([]float64, 6)); !errors.Is(err, ErrNoForward) {
		t.Errorf("Backward before Forward: %v", err)
	}
	for _, c := range []struct {
		x []float64
		n int
	}{{make([]float64, 5), 2}, {make([]float64, 7), 2}, {nil, -1}, {make([]float64, 3), 1}, {nil, 0}} {
		if _, err := bn.Forward(c.x, c.n); !errors.Is(err, ErrInput) {
			t.Errorf("Forward of %d values, %d rows: %v, want ErrInput", len(c.x), c.n, err)
		}
	}
	if _, err := bn.Forward(make([]float64, 6), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := bn.Backward(make([]float64, 5)); !errors.Is(err, ErrInput) {
		t.Errorf("Backward of 5 values after 2 rows of 3: %v", err)
	}
	bn.SetTraining(false)
	if _, err := bn.Forward(make([]float64, 4), 1); !errors.Is(err, ErrInput) {
		t.Errorf("eval Forward of 4 values, 1 row: %v", err)
	}
	if _, err := bn.Forward(make([]float64, 3), 1); err != nil {
		t.Errorf("eval Forward of one row: %v", err)
	}
}

// TestSyncInputErrors: at np 3, one rank's bad input is ErrInput there and
// ErrRemoteInput on the others (no rank waits); a global batch of one
// row is ErrInput on every rank; afterwards the layers work again.
func TestSyncInputErrors(t *testing.T) {
	rts := startRuntimes(t, 3)
	errs := onRanks(rts, func(ctx context.Context, r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		bn, err := NewBatchNorm[float64]("bn", 2, Sync(coll))
		if err != nil {
			return err
		}
		x := make([]float64, 4)
		// Rank 1 gives 3 values for 2 rows.
		xs := x
		if rank == 1 {
			xs = x[:3]
		}
		_, err = bn.ForwardContext(ctx, xs, 2)
		if want := map[bool]error{true: ErrInput, false: ErrRemoteInput}[rank == 1]; !errors.Is(err, want) {
			return fmt.Errorf("Forward with rank 1's bad input: %v, want %v", err, want)
		}
		if _, err := bn.BackwardContext(ctx, x); !errors.Is(err, ErrNoForward) {
			return fmt.Errorf("Backward after the failed Forward: %v", err)
		}
		// One row in all: rank 2's.
		n := 0
		if rank == 2 {
			n = 1
		}
		if _, err := bn.ForwardContext(ctx, x[:2*n], n); !errors.Is(err, ErrInput) {
			return fmt.Errorf("Forward of one row over all ranks: %v", err)
		}
		// Good input, then bad dy on rank 0.
		if _, err := bn.ForwardContext(ctx, []float64{float64(rank), 1, 2, float64(-rank)}, 2); err != nil {
			return err
		}
		dy := x
		if rank == 0 {
			dy = x[:1]
		}
		_, err = bn.BackwardContext(ctx, dy)
		if want := map[bool]error{true: ErrInput, false: ErrRemoteInput}[rank == 0]; !errors.Is(err, want) {
			return fmt.Errorf("Backward with rank 0's bad dy: %v, want %v", err, want)
		}
		if _, err := bn.BackwardContext(ctx, x); err != nil {
			return fmt.Errorf("Backward again with good dy: %w", err)
		}
		return nil
	})
	fatalErrs(t, errs)
}

// TestSyncProcessSets: at np 4, the even and the odd ranks each run a
// sync layer within their own process set (optim.FromProcessSet), under
// the same layer name, and each matches the reference on its set's
// concatenated batch.
func TestSyncProcessSets(t *testing.T) {
	rts := startRuntimes(t, 4, hvd.WithDynamicProcessSets())
	errs := onRanks(rts, func(ctx context.Context, r *hvd.Runtime, rank int) error {
		return setsCheck(ctx, r)
	})
	fatalErrs(t, errs)
}

// setsCheck splits r's ranks into the even and the odd ones and runs
// syncCheck within this rank's set (uneven: the set's first rank has 2
// rows, the next 5, ...).
func setsCheck(ctx context.Context, r *hvd.Runtime) error {
	var mine *hvd.ProcessSet
	for g := range 2 {
		var rs []int
		for k := g; k < r.Size(); k += 2 {
			rs = append(rs, k)
		}
		ps, err := r.AddProcessSet(ctx, rs)
		if err != nil {
			return err
		}
		if g == r.Rank()%2 {
			mine = ps
		}
	}
	coll, err := optim.FromProcessSet(r, mine)
	if err != nil {
		return err
	}
	counts := make([]int, mine.Size())
	for i := range counts {
		counts[i] = 2 + 3*i
	}
	if err := syncCheck[float64](ctx, coll, "setbn", mine.Rank(), counts, 2, uint64(10+r.Rank()%2)); err != nil {
		return fmt.Errorf("within %v: %w", mine, err)
	}
	for _, ps := range r.ProcessSets()[1:] {
		if err := r.RemoveProcessSet(ctx, ps); err != nil {
			return err
		}
	}
	return nil
}

// TestDistributedConvention: the loss-scaling convention of the package
// documentation, end to end with a DistributedOptimizer (Average, SGD
// with learning rate 1) on np 2 and 3 with uneven batches. The model is
// x → layer → Σ_i ℓ_i with ℓ_i = Σ_j a_j·y_ij, and a global loss that is
// the mean over all N rows. Each rank scales its summed loss by R/N, so
// that dy = R/N·a; then after one step the weight and bias equal a single
// process's after one step on the concatenated batch with dy = a/N, and
// each rank's dx is R times its rows of the single process's dx.
func TestDistributedConvention(t *testing.T) {
	const c = 3
	a := []float64{1, -2, 0.5}
	for _, counts := range [][]int{{3, 7}, {2, 0, 5}} {
		np, total := len(counts), sum(counts)
		x, _, w, b := batch(5, 0, total, c)
		dyAll := make([]float64, total*c)
		for i := range dyAll {
			dyAll[i] = a[i%c] / float64(total)
		}
		want := refForward(x, total, c, w, b, DefaultEps)
		dx, dw, db := want.backward(dyAll, w)
		t.Run(fmt.Sprint(counts), func(t *testing.T) {
			rts := startRuntimes(t, np)
			errs := onRanks(rts, func(ctx context.Context, r *hvd.Runtime, rank int) error {
				coll, err := optim.FromRuntime(r)
				if err != nil {
					return err
				}
				bn, err := NewBatchNorm[float64]("bn", c, Sync(coll))
				if err != nil {
					return err
				}
				copy(bn.weight.Value.Float64s(), w)
				copy(bn.bias.Value.Float64s(), b)
				sgd, err := optim.NewSGD(bn.Params(), optim.SGDConfig{LR: 1})
				if err != nil {
					return err
				}
				opt, err := optim.NewDistributed(sgd, coll)
				if err != nil {
					return err
				}
				defer opt.Close()
				lo, n := sum(counts[:rank]), counts[rank]
				if _, err := bn.ForwardContext(ctx, x[lo*c:(lo+n)*c], n); err != nil {
					return err
				}
				dy := make([]float64, n*c)
				for i := range dy {
					dy[i] = float64(np) / float64(total) * a[i%c]
				}
				gx, err := bn.BackwardContext(ctx, dy)
				if err != nil {
					return err
				}
				scaled := make([]float64, n*c)
				for i := range scaled {
					scaled[i] = float64(np) * dx[lo*c+i]
				}
				if err := closeTo("dx", gx, scaled, tol64); err != nil {
					return err
				}
				if err := opt.StepContext(ctx); err != nil {
					return err
				}
				ww, bb := make([]float64, c), make([]float64, c)
				for j := range c {
					ww[j], bb[j] = w[j]-dw[j], b[j]-db[j]
				}
				if err := closeTo("weight", bn.weight.Value.Float64s(), ww, tol64); err != nil {
					return err
				}
				return closeTo("bias", bn.bias.Value.Float64s(), bb, tol64)
			})
			fatalErrs(t, errs)
		})
	}
}

// TestAbandonedWait: a Forward whose wait is cancelled returns the
// context's error; the next Forward first finishes that reduction and
// then works.
func TestAbandonedWait(t *testing.T) {
	rts := startRuntimes(t, 2)
	gaveUp := make(chan struct{}) // rank 0's Forward returned
	errs := onRanks(rts, func(ctx context.Context, r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		bn, err := NewBatchNorm[float64]("bn", 2, Sync(coll))
		if err != nil {
			return err
		}
		x := []float64{1, 2, 3, float64(5 * rank)}
		if rank == 0 {
			// Rank 0 gives up at once (rank 1 has not joined: the
			// reduction cannot have completed); rank 1 joins after.
			done, cancel := context.WithCancel(ctx)
			cancel()
			_, err := bn.ForwardContext(done, x, 2)
			close(gaveUp)
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrCollective) {
				return fmt.Errorf("cancelled Forward: %v", err)
			}
		} else {
			<-gaveUp
			if _, err := bn.ForwardContext(ctx, x, 2); err != nil {
				return err
			}
		}
		// Both ranks again: rank 0 first settles its abandoned reduction.
		y, err := bn.ForwardContext(ctx, x, 2)
		if err != nil {
			return err
		}
		if len(y) != 4 {
			return fmt.Errorf("%d outputs", len(y))
		}
		return nil
	})
	fatalErrs(t, errs)
}
