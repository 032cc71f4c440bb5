package optim

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// newOwnLinear is the linear model of the equivalence tests written the
// way Go code naturally is: it wraps its own gradient slices in the Param
// tensors and writes into those slices, never through Param.Grad.
func newOwnLinear(d int, seed uint64) *linear {
	m := newLinear(d, seed) // the same starting weights
	m.ownW, m.ownB = make([]float64, d), []float64{0}
	m.params[0].Grad = tensor.FromFloat64(m.ownW)
	m.params[1].Grad = tensor.FromFloat64(m.ownB)
	return m
}

// trainOwnSlices trains newOwnLinear's model for steps on rank's share of each global
// batch through coll with the DistributedOptimizer's default options (plus
// opts), reporting each gradient Ready when report is set, and returns the
// final weights; with coll nil it trains one process on the whole batch.
func trainOwnSlices(ctx context.Context, coll Collectives, rank, size, steps int, report bool, opts ...DistOption) ([]float64, error) {
	return trainModel(ctx, newOwnLinear(6, uint64(rank)+1), coll, rank, size, steps, report, opts...)
}

// checkOwnSlices trains newOwnLinear's model on rts, with and without Ready, and
// compares every rank's parameters with want (a single process's).
func checkOwnSlices(t *testing.T, rts []*hvd.Runtime, steps int, want []float64) {
	t.Helper()
	n := len(rts)
	for _, report := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		onRanks(t, n, func(rank int) error {
			coll, err := FromRuntime(rts[rank])
			if err != nil {
				return err
			}
			got, err := trainOwnSlices(ctx, coll, rank, n, steps, report)
			if err != nil {
				return fmt.Errorf("Ready %v: %w", report, err)
			}
			if err := closeTo(got, want, 1e-12); err != nil {
				return fmt.Errorf("Ready %v: %w", report, err)
			}
			return nil
		})
		cancel()
	}
}

// TestOwnGradientSlices: a model that writes into the gradient slices it
// wrapped itself trains, with the default options, with and without
// Ready, exactly as one process on the global batch does, at np 2 and 3,
// over the in-memory and the embedded transports.
func TestOwnGradientSlices(t *testing.T) {
	const steps = 20
	want, err := trainOwnSlices(context.Background(), nil, 0, 1, steps, false)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := equivalenceRun(context.Background(), nil, 0, 1, steps)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(want, ref) {
		t.Fatalf("the own-slices model alone %v, the Param.Grad one %v: not the same model", want, ref)
	}
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint("memory/np", n), func(t *testing.T) {
			checkOwnSlices(t, startRuntimes(t, n), steps, want)
		})
		t.Run(fmt.Sprint("embedded/np", n), func(t *testing.T) {
			rts := startEmbedded(t, n)
			checkOwnSlices(t, rts, steps, want)
		})
	}
}

// TestOwnFlatGradients: gradients that the model allocated itself as views
// of one flat buffer (tensor.NewFlat, in forward order) and writes through
// its own slices stay where they are by default, are averaged correctly,
// and the runtime reduces them where they lie, without a copy. When
// another rank's gradients are separate allocations (handed to the runtime
// in another order) they are still averaged correctly; the fused order is
// then not every rank's memory order, and copies remain.
func TestOwnFlatGradients(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprint("mixed=", mixed), func(t *testing.T) { ownFlatGradients(t, mixed) })
	}
}

func ownFlatGradients(t *testing.T, mixed bool) {
	const n = 2
	rts := startRuntimes(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shapes := []tensor.Shape{{3, 2}, {4}, {5}, {1}}
	onRanks(t, n, func(rank int) error {
		coll, err := FromRuntime(rts[rank])
		if err != nil {
			return err
		}
		_, grads := tensor.NewFlat(tensor.Float32, shapes...)
		if mixed && rank == 1 {
			for i, s := range shapes {
				grads[i] = tensor.New(tensor.Float32, s...)
			}
		}
		own := make([][]float32, len(grads))
		params := make([]Param, len(grads))
		for i, g := range grads {
			own[i] = g.Float32s()
			params[i] = Param{Name: fmt.Sprint("p", i), Value: tensor.New(tensor.Float32, shapes[i]...), Grad: g}
		}
		inner, _ := NewSGD(params, SGDConfig{LR: 0.1})
		opt, err := NewDistributed(inner, coll)
		if err != nil {
			return err
		}
		for i, p := range params {
			if &p.Grad.Float32s()[0] != &own[i][0] {
				return fmt.Errorf("%s: the gradient was moved by default", p.Name)
			}
		}
		for range 3 {
			if err := opt.ZeroGrad(); err != nil {
				return err
			}
			for i := len(params) - 1; i >= 0; i-- {
				for j := range own[i] {
					own[i][j] = float32(rank + 1 + 10*i + j)
				}
				if err := opt.Ready(params[i]); err != nil {
					return err
				}
			}
			if err := opt.Synchronize(ctx); err != nil {
				return err
			}
			for i := range params {
				for j, v := range own[i] {
					if want := 1.5 + float32(10*i+j); v != want {
						return fmt.Errorf("%s[%d] = %g, want %g", params[i].Name, j, v, want)
					}
				}
			}
		}
		return opt.Close()
	})
	if s := rts[0].Stats(); !mixed && (s.FusedInPlace == 0 || s.FusedCopied != 0) {
		t.Fatalf("gradients in one buffer: %d bytes fused in place, %d copied; want all in place", s.FusedInPlace, s.FusedCopied)
	}
}

// TestInMemoryOrder: members lying back to back in one allocation are put
// in memory order, runs in the order of their first member, every member
// kept once (two parameters sharing a gradient tensor included).
func TestInMemoryOrder(t *testing.T) {
	_, f := tensor.NewFlat(tensor.Float32, tensor.Shape{2}, tensor.Shape{3}, tensor.Shape{4}, tensor.Shape{0}, tensor.Shape{1})
	sep := tensor.New(tensor.Float32, 2)
	wire := []*tensor.Tensor{f[0], f[1], f[2], sep, f[4], f[1], f[3]}
	for _, c := range []struct {
		members, want []int
	}{
		{[]int{2, 1, 0}, []int{0, 1, 2}},                   // forward flat, in backward order
		{[]int{0, 1, 2}, []int{0, 1, 2}},                   // already in memory order
		{[]int{3, 2, 0, 1}, []int{3, 0, 1, 2}},             // a separate tensor first
		{[]int{2, 3, 0}, []int{2, 3, 0}},                   // 0 and 2 do not touch
		{[]int{4, 2, 1, 5}, []int{1, 2, 4, 5}},             // 5 shares 1's tensor: a run of its own
		{[]int{6, 4, 2}, []int{6, 2, 4}},                   // an empty tensor between 2 and 4
		{[]int{4, 6, 2, 1, 0, 3}, []int{6, 0, 1, 2, 4, 3}}, // the whole lot
	} {
		got := slices.Clone(c.members)
		inMemoryOrder(got, wire)
		if !slices.Equal(got, c.want) {
			t.Errorf("inMemoryOrder(%v) = %v, want %v", c.members, got, c.want)
		}
	}
}
