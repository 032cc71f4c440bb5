package gomlxopt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

func sgd() optimizers.Interface {
	return optimizers.StochasticGradientDescent().WithLearningRate(0.1).Done()
}

func adam() optimizers.Interface { return optimizers.Adam().LearningRate(0.01).Done() }

// inProcess runs size ranks as goroutines over an in-memory hub and returns
// each rank's variables and averaged losses.
func inProcess(t *testing.T, size, b, steps int, opt func() optimizers.Interface, x []float32, y []int32,
	opts ...Option) ([]map[string][]float32, [][]float64) {
	t.Helper()
	h := newHub(size)
	vars := make([]map[string][]float32, size)
	ls := make([][]float64, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			vars[r], ls[r], errs[r] = runRank(context.Background(), h.coll(r), r, size, b, steps, opt, x, y, opts...)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return vars, ls
}

// TestEquivalence: size ranks on b rows each, averaging gradients, end where
// one process with GoMLX's own trainer ends on size·b rows, with SGD and
// with Adam, at np 2 and 3; every rank holds the same variables.
func TestEquivalence(t *testing.T) {
	const b, steps = 8, 4
	for _, tc := range []struct {
		name string
		opt  func() optimizers.Interface
	}{{"sgd", sgd}, {"adam", adam}} {
		for _, size := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/np%d", tc.name, size), func(t *testing.T) {
				x, y := batchData(size*b*steps, 1)
				want, wantLoss := reference(t, tc.opt, steps, size*b, x, y)
				vars, ls := inProcess(t, size, b, steps, tc.opt, x, y)
				for r := range size {
					if d := maxRelDiff(t, vars[r], vars[0]); d != 0 {
						t.Errorf("rank %d differs from rank 0 by %g", r, d)
					}
				}
				d := maxRelDiff(t, vars[0], want)
				t.Logf("max relative difference from one process: %g", d)
				if d > equivalenceTol {
					t.Errorf("variables differ from one process on the whole batch by %g > %g", d, equivalenceTol)
				}
				for s := range steps {
					if d := math.Abs(ls[0][s] - wantLoss[s]); d > equivalenceTol*(1+wantLoss[s]) {
						t.Errorf("step %d: loss %g, one process %g", s, ls[0][s], wantLoss[s])
					}
				}
			})
		}
	}
}

// TestCompression: FP16 and BF16 gradients still train every rank to the
// same variables, near the uncompressed run.
func TestCompression(t *testing.T) {
	const size, b, steps = 2, 8, 3
	x, y := batchData(size*b*steps, 2)
	want, _ := reference(t, sgd, steps, size*b, x, y)
	for _, c := range []optim.Compression{optim.FP16, optim.BF16} {
		vars, _ := inProcess(t, size, b, steps, sgd, x, y, WithCompression(c))
		if d := maxRelDiff(t, vars[1], vars[0]); d != 0 {
			t.Errorf("%v: ranks differ by %g", c, d)
		}
		if d := maxRelDiff(t, vars[0], want); d > 1e-2 || d == 0 {
			t.Errorf("%v: variables differ from uncompressed by %g", c, d)
		}
	}
}

// TestErrors: a failing runtime and bad arguments come back as errors.
func TestErrors(t *testing.T) {
	h := newHub(2)
	h.fail = errors.New("rank 1 is gone")
	x, y := batchData(8, 3)
	tr, err := NewTrainer(testBackend(), newCtx(1), mlpModel, losses.SparseCategoricalCrossEntropyLogits, sgd(), h.coll(0))
	if err != nil {
		t.Fatal(err)
	}
	in, lab := rows(x, y, 0, 8)
	if _, err := tr.TrainStep(context.Background(), in, lab); err == nil || !errors.Is(err, h.fail) {
		t.Fatalf("TrainStep over a failed runtime: %v", err)
	}
	// Only Prepare ran: with the broadcast skipped (elastic), the failure
	// comes from the allreduce.
	if _, err := tr.ElasticHandler(); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.TrainStep(context.Background(), in, lab); !errors.Is(err, h.fail) {
		t.Fatalf("TrainStep over a failed runtime: %v", err)
	}
	if _, err := NewTrainer(testBackend(), newCtx(1), mlpModel, losses.SparseCategoricalCrossEntropyLogits, noGrads{}, h.coll(0)); !errors.Is(err, ErrOptimizer) {
		t.Errorf("optimizer without UpdateGraphWithGradients: %v", err)
	}
	// A model GoMLX rejects (a label of the wrong shape) is an error.
	tr2, err := NewTrainer(testBackend(), newCtx(1), mlpModel, losses.SparseCategoricalCrossEntropyLogits, sgd(), newHub(1).coll(0))
	if err != nil {
		t.Fatal(err)
	}
	_, bad := rows(x, y, 0, 4)
	if _, err := tr2.TrainStep(context.Background(), in, bad); err == nil {
		t.Error("mismatched labels: no error")
	}
}

type noGrads struct{ optimizers.Interface }

// TestLRAndElastic: SetLR reaches GoMLX's learning-rate variable, and the
// elastic handler restores the variables and the optimizer state.
func TestLRAndElastic(t *testing.T) {
	x, y := batchData(16, 4)
	tr, err := NewTrainer(testBackend(), newCtx(1), mlpModel, losses.SparseCategoricalCrossEntropyLogits, adam(), newHub(1).coll(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetLR(ScaleLR(0.01, 4)); err != nil {
		t.Fatal(err)
	}
	in, lab := rows(x, y, 0, 8)
	if err := tr.Prepare(in, lab); err != nil {
		t.Fatal(err)
	}
	if lr := tr.LR(); math.Abs(lr-0.04) > 1e-7 {
		t.Fatalf("LR %g after SetLR(0.04)", lr)
	}
	h, err := tr.ElasticHandler()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.TrainStep(context.Background(), in, lab); err != nil {
		t.Fatal(err)
	}
	committed := flatVars(t, tr.Context())
	step := optimizers.GetGlobalStep(tr.Context())
	if err := h.Save(); err != nil {
		t.Fatal(err)
	}
	in2, lab2 := rows(x, y, 8, 16)
	if _, err := tr.TrainStep(context.Background(), in2, lab2); err != nil {
		t.Fatal(err)
	}
	if maxRelDiff(t, flatVars(t, tr.Context()), committed) == 0 {
		t.Fatal("the step changed nothing")
	}
	// A batch of another size builds new graphs over the same variables.
	in3, lab3 := rows(x, y, 8, 12)
	if _, err := tr.TrainStep(context.Background(), in3, lab3); err != nil {
		t.Fatalf("a smaller batch: %v", err)
	}
	if err := h.Restore(); err != nil {
		t.Fatal(err)
	}
	if d := maxRelDiff(t, flatVars(t, tr.Context()), committed); d != 0 {
		t.Errorf("restored variables differ by %g", d)
	}
	if s := optimizers.GetGlobalStep(tr.Context()); s != step {
		t.Errorf("global step %d after restore, committed %d", s, step)
	}
}

// bcaster is an elastic.Broadcaster over the in-memory hub (every rank's b
// has the root's length, as the handler's variables do).
type bcaster struct {
	c *memColl
	n int
}

func (b *bcaster) BroadcastBytes(ctx context.Context, p []byte, root int) ([]byte, error) {
	b.n++
	t := tensor.FromUint8(append([]byte(nil), p...), len(p))
	w, err := b.c.BroadcastAsync(t, root, fmt.Sprint(b.n))
	if err != nil {
		return nil, err
	}
	if err := w.Wait(ctx); err != nil {
		return nil, err
	}
	return t.Bytes(), nil
}

// TestElasticSync: the handler's Sync gives every rank rank 0's variables
// and optimizer state, without the Trainer's own broadcast.
func TestElasticSync(t *testing.T) {
	const size = 2
	h := newHub(size)
	x, y := batchData(8, 6)
	vars := make([]map[string][]float32, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			errs[r] = func() error {
				tr, err := NewTrainer(testBackend(), newCtx(int64(10+r)), mlpModel, losses.SparseCategoricalCrossEntropyLogits, adam(), h.coll(r))
				if err != nil {
					return err
				}
				in, lab := rows(x, y, 0, 8)
				if err := tr.Prepare(in, lab); err != nil {
					return err
				}
				hd, err := tr.ElasticHandler()
				if err != nil {
					return err
				}
				if err := hd.Sync(context.Background(), &bcaster{c: h.coll(r)}); err != nil {
					return err
				}
				if _, err := tr.TrainStep(context.Background(), in, lab); err != nil {
					return err
				}
				vars[r] = flatVars(t, tr.Context())
				return nil
			}()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if d := maxRelDiff(t, vars[1], vars[0]); d != 0 {
		t.Errorf("ranks differ by %g after Sync and a step", d)
	}
}
