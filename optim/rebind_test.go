package optim

import (
	"errors"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestRebind: an optimizer made on one group keeps stepping after its
// runtime is replaced by one of another size, once rebound; without
// Rebind its step fails (its reduce group belongs to the old runtime).
func TestRebind(t *testing.T) {
	const n = 3
	opts := make([]*DistributedOptimizer, n)
	params := make([]Param, n)
	first, err := hvd.StartLocal(n, hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range first {
		params[i] = Param{Name: "w", Value: tensor.FromFloat64([]float64{0, 0}), Grad: tensor.FromFloat64([]float64{0, 0})}
		sgd, err := NewSGD([]Param{params[i]}, SGDConfig{LR: 1})
		if err != nil {
			t.Fatal(err)
		}
		coll, err := FromRuntime(r)
		if err != nil {
			t.Fatal(err)
		}
		if opts[i], err = NewDistributed(sgd, coll); err != nil {
			t.Fatal(err)
		}
	}
	// step sets rank i's gradient to (i+1, 1) and steps ranks [0, size).
	step := func(size int) []error {
		errs := make([]error, size)
		var wg sync.WaitGroup
		for i := range size {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := params[i].Grad.Float64s()
				g[0], g[1] = float64(i+1), 1
				errs[i] = opts[i].Step()
			}()
		}
		wg.Wait()
		return errs
	}
	for i, err := range step(n) {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	// Average of 1, 2, 3 is 2: w = -2 and -1 after one step of lr 1.
	if w := params[0].Value.Float64s(); w[0] != -2 || w[1] != -1 {
		t.Fatalf("w after the first step: %v", w)
	}
	if err := hvd.StopLocal(first); err != nil {
		t.Fatal(err)
	}
	// The group shrinks to two: without Rebind, stepping fails.
	second, err := hvd.StartLocal(2, hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	defer hvd.StopLocal(second)
	g := params[0].Grad.Float64s()
	g[0], g[1] = 1, 1
	if err := opts[0].Step(); err == nil {
		t.Fatal("a step on the old runtime succeeded")
	}
	for i, r := range second {
		coll, err := FromRuntime(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := opts[i].Rebind(coll); err != nil {
			t.Fatalf("rank %d: Rebind: %v", i, err)
		}
	}
	for i, err := range step(2) {
		if err != nil {
			t.Fatalf("rank %d after Rebind: %v", i, err)
		}
	}
	// Average of 1 and 2 is 1.5: w = -3.5 and -2.
	if w := params[1].Value.Float64s(); w[0] != -3.5 || w[1] != -2 {
		t.Fatalf("w after the rebound step: %v", w)
	}
	// A Collectives that holds no groups cannot take over held ones.
	if err := opts[2].Rebind(plainCollectives{}); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("Rebind onto a Collectives without groups: %v", err)
	}
}

// plainCollectives provides no reduce groups.
type plainCollectives struct{}

func (plainCollectives) Size() int { return 1 }
func (plainCollectives) AllreduceAsync(*tensor.Tensor, string, tensor.ReduceOp, float64, float64) (Waiter, error) {
	return nil, errors.New("unused")
}
func (plainCollectives) BroadcastAsync(*tensor.Tensor, int, string) (Waiter, error) {
	return nil, errors.New("unused")
}
