package gorgoniaopt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gorgonia.org/gorgonia"
	gtensor "gorgonia.org/tensor"

	"github.com/gohorovod/gohorovod/examples/internal/localrun"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

const (
	features = 3
	batch    = 8 // global batch
	steps    = 30
)

// linear is a gorgonia linear regression, pred = x·w + c, with the mean
// squared error over the batch as loss: a dense weight vector and a scalar
// bias, so both kinds of value pass through the solver.
type linear struct {
	g    *gorgonia.ExprGraph
	x, y *gorgonia.Node
	w, c *gorgonia.Node
	vm   gorgonia.VM
}

func newLinear(rows int, w0 []float64, c0 float64) (*linear, error) {
	m := &linear{g: gorgonia.NewGraph()}
	m.x = gorgonia.NewMatrix(m.g, gtensor.Float64, gorgonia.WithShape(rows, features), gorgonia.WithName("x"),
		gorgonia.WithValue(gtensor.New(gtensor.WithShape(rows, features), gtensor.Of(gtensor.Float64))))
	m.y = gorgonia.NewVector(m.g, gtensor.Float64, gorgonia.WithShape(rows), gorgonia.WithName("y"),
		gorgonia.WithValue(gtensor.New(gtensor.WithShape(rows), gtensor.Of(gtensor.Float64))))
	m.w = gorgonia.NewVector(m.g, gtensor.Float64, gorgonia.WithShape(features), gorgonia.WithName("w"),
		gorgonia.WithValue(gtensor.New(gtensor.WithShape(features), gtensor.WithBacking(append([]float64(nil), w0...)))))
	m.c = gorgonia.NewScalar(m.g, gtensor.Float64, gorgonia.WithName("c"), gorgonia.WithValue(c0))
	xw, err := gorgonia.Mul(m.x, m.w)
	if err != nil {
		return nil, err
	}
	pred, err := gorgonia.Add(xw, m.c)
	if err != nil {
		return nil, err
	}
	diff, err := gorgonia.Sub(pred, m.y)
	if err != nil {
		return nil, err
	}
	sq, err := gorgonia.Square(diff)
	if err != nil {
		return nil, err
	}
	loss, err := gorgonia.Mean(sq)
	if err != nil {
		return nil, err
	}
	if _, err := gorgonia.Grad(loss, m.w, m.c); err != nil {
		return nil, err
	}
	m.vm = gorgonia.NewTapeMachine(m.g, gorgonia.BindDualValues(m.w, m.c))
	return m, nil
}

func (m *linear) model() []gorgonia.ValueGrad {
	return gorgonia.NodesToValueGrads(gorgonia.Nodes{m.w, m.c})
}

// weights returns w then c.
func (m *linear) weights() []float64 {
	return append(append([]float64(nil), m.w.Value().Data().([]float64)...), float64(*m.c.Value().(*gorgonia.F64)))
}

// batchAt returns step's global batch: rows of x and the targets of a
// fixed noisy linear function.
func batchAt(step int) (x, y []float64) {
	r := rand.New(rand.NewPCG(uint64(step), 3))
	truth := []float64{2, -1, 0.5}
	x, y = make([]float64, batch*features), make([]float64, batch)
	for i := range batch {
		for j := range features {
			x[i*features+j] = r.NormFloat64()
			y[i] += truth[j] * x[i*features+j]
		}
		y[i] += 0.7 + 0.1*r.NormFloat64()
	}
	return x, y
}

// train runs steps on rank's rows of each global batch, its gradients
// combined through coll (nil: one process on the whole batch), with the
// solver made by newSolver, and returns the final weights.
func train(rank, size int, coll optim.Collectives, newSolver func() gorgonia.Solver) ([]float64, error) {
	rows := batch / size
	m, err := newLinear(rows, []float64{0.1, -0.2, 0.3}, 0)
	if err != nil {
		return nil, err
	}
	defer m.vm.Close()
	var solver gorgonia.Solver = newSolver()
	if coll != nil {
		solver = New(solver, coll)
	}
	for s := range steps {
		x, y := batchAt(s)
		x, y = x[rank*rows*features:(rank+1)*rows*features], y[rank*rows:(rank+1)*rows]
		if err := gorgonia.Let(m.x, gtensor.New(gtensor.WithShape(rows, features), gtensor.WithBacking(x))); err != nil {
			return nil, err
		}
		if err := gorgonia.Let(m.y, gtensor.New(gtensor.WithShape(rows), gtensor.WithBacking(y))); err != nil {
			return nil, err
		}
		if err := m.vm.RunAll(); err != nil {
			return nil, err
		}
		if err := solver.Step(m.model()); err != nil {
			return nil, err
		}
		m.vm.Reset()
	}
	return m.weights(), nil
}

var solvers = []struct {
	name string
	new  func() gorgonia.Solver
}{
	{"Vanilla", func() gorgonia.Solver { return gorgonia.NewVanillaSolver(gorgonia.WithLearnRate(0.1)) }},
	{"Momentum", func() gorgonia.Solver { return gorgonia.NewMomentum(gorgonia.WithLearnRate(0.05)) }},
	{"Adam", func() gorgonia.Solver { return gorgonia.NewAdamSolver(gorgonia.WithLearnRate(0.05)) }},
}

// TestMatchesOneProcess: 2 and 4 ranks, each with its rows of every global
// batch, end with the weights that one process on the whole batch ends
// with, for several wrapped solvers; without the averaging they would not
// (checked below).
func TestMatchesOneProcess(t *testing.T) {
	for _, sv := range solvers {
		want, err := train(0, 1, nil, sv.new)
		if err != nil {
			t.Fatalf("%s, one process: %v", sv.name, err)
		}
		// Rank 0's rows alone lead elsewhere: the test can tell.
		alone, err := train(0, 2, nil, sv.new)
		if err != nil {
			t.Fatal(err)
		}
		if closeTo(alone, want, 1e-6) == nil {
			t.Fatalf("%s: half the batch trains to the same weights; the test would not tell", sv.name)
		}
		for _, n := range []int{2, 4} {
			got := make([][]float64, n)
			localrun.OnRanks(t, n, func(rank int, c optim.Collectives) error {
				var err error
				got[rank], err = train(rank, n, c, sv.new)
				return err
			})
			for rank := range n {
				if err := closeTo(got[rank], want, 1e-12); err != nil {
					t.Errorf("%s, np %d, rank %d: %v", sv.name, n, rank, err)
				}
			}
		}
	}
}

func closeTo(got, want []float64, tol float64) error {
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol*(1+math.Abs(want[i])) {
			return fmt.Errorf("weight %d = %.17g, want %.17g", i, got[i], want[i])
		}
	}
	return nil
}

// TestBroadcast: ranks built with different weights hold rank 0's after
// Broadcast, dense and scalar alike.
func TestBroadcast(t *testing.T) {
	got := make([][]float64, 3)
	localrun.OnRanks(t, 3, func(rank int, c optim.Collectives) error {
		v := float64(rank + 1)
		m, err := newLinear(2, []float64{v, 2 * v, 3 * v}, -v)
		if err != nil {
			return err
		}
		defer m.vm.Close()
		if err := Broadcast(context.Background(), c, m.model(), 0); err != nil {
			return err
		}
		got[rank] = m.weights()
		return nil
	})
	for rank, w := range got {
		if err := closeTo(w, []float64{1, 2, 3, -1}, 0); err != nil {
			t.Errorf("rank %d: %v", rank, err)
		}
	}
}

// fake is a one-rank Collectives that records names and can fail.
type fake struct {
	names []string
	fail  error
}

type done struct{}

func (done) Wait(context.Context) error { return nil }

func (f *fake) Size() int { return 1 }

func (f *fake) AllreduceAsync(t *tensor.Tensor, name string, op tensor.ReduceOp, pre, post float64) (optim.Waiter, error) {
	f.names = append(f.names, name)
	if f.fail != nil {
		return nil, f.fail
	}
	return done{}, nil
}

func (f *fake) BroadcastAsync(t *tensor.Tensor, root int, name string) (optim.Waiter, error) {
	return f.AllreduceAsync(t, name, optim.Sum, 1, 1)
}

// counting is a solver that counts its steps.
type counting struct{ steps int }

func (c *counting) Step([]gorgonia.ValueGrad) error { c.steps++; return nil }

// valueGrad is a hand-made ValueGrad.
type valueGrad struct {
	v, g gorgonia.Value
	err  error
}

func (n valueGrad) Value() gorgonia.Value         { return n.v }
func (n valueGrad) Grad() (gorgonia.Value, error) { return n.g, n.err }

func TestStepErrors(t *testing.T) {
	dense := func(dt gtensor.Dtype) gorgonia.Value { return gtensor.New(gtensor.WithShape(2), gtensor.Of(dt)) }
	f32 := gorgonia.F32(1)
	errTransport := errors.New("transport failed")
	for _, c := range []struct {
		name    string
		model   []gorgonia.ValueGrad
		fail    error
		wantErr string
	}{
		{"ok", []gorgonia.ValueGrad{valueGrad{v: dense(gtensor.Float32), g: dense(gtensor.Float32)}, valueGrad{v: &f32, g: &f32}}, nil, ""},
		{"no gradient", []gorgonia.ValueGrad{valueGrad{v: dense(gtensor.Float64), err: errors.New("no grad")}}, nil, "no grad"},
		{"int gradient", []gorgonia.ValueGrad{valueGrad{v: dense(gtensor.Int), g: dense(gtensor.Int)}}, nil, "unsupported dtype"},
		{"transport", []gorgonia.ValueGrad{valueGrad{v: dense(gtensor.Float64), g: dense(gtensor.Float64)}}, errTransport, "transport failed"},
	} {
		inner := &counting{}
		f := &fake{fail: c.fail}
		err := New(inner, f, WithName("m")).Step(c.model)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.wantErr)
		case c.wantErr == "" && (inner.steps != 1 || len(f.names) != len(c.model) || f.names[0] != "m.0.node0"):
			t.Errorf("%s: %d inner steps, names %q", c.name, inner.steps, f.names)
		case c.wantErr != "" && inner.steps != 0:
			t.Errorf("%s: the inner solver stepped after an error", c.name)
		}
	}
}
