package gonumopt

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"gonum.org/v1/gonum/optimize"

	"github.com/gohorovod/gohorovod/examples/internal/localrun"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestMatchesOneProcess: N ranks, each with a shard of a logistic
// regression (uneven at np 3), reach with every method the minimiser that
// one process finds on the whole data, and all ranks end bit for bit alike
// after the same number of evaluations.
func TestMatchesOneProcess(t *testing.T) {
	data := makeData(301)
	want := make([]*optimize.Result, len(methods))
	for i, m := range methods {
		full := data.local()
		res, err := minimize(optimize.Problem{Func: full.Func, Grad: full.Grad, Hess: full.Hess}, m.new())
		if err != nil {
			t.Fatalf("%s on one process: %v", m.name, err)
		}
		want[i] = res
	}
	// A rank's shard alone has another minimiser: the test can tell.
	alone, err := minimize(optimize.Problem{Func: data.shard(0, 2).Func, Grad: data.shard(0, 2).Grad}, &optimize.BFGS{})
	if err != nil {
		t.Fatal(err)
	}
	if within(alone.X, want[0].X, 1e-3) == nil {
		t.Fatal("a shard alone has the same minimiser as the whole data; the test would not tell")
	}
	for _, n := range []int{2, 3, 4} {
		got := make([][]*optimize.Result, n)
		localrun.OnRanks(t, n, func(rank int, c optim.Collectives) error {
			for _, m := range methods {
				obj, err := New(c, data.shard(rank, n).local(), WithName(m.name))
				if err != nil {
					return err
				}
				res, err := minimize(obj.Problem(), m.new())
				if err != nil {
					return err
				}
				got[rank] = append(got[rank], res)
			}
			return nil
		})
		for i, m := range methods {
			for rank := range n {
				g := got[rank][i]
				if err := within(g.X, want[i].X, m.tol); err != nil {
					t.Errorf("np %d, %s, rank %d: %v", n, m.name, rank, err)
				}
				s, s0 := g.Stats, got[0][i].Stats
				s.Runtime, s0.Runtime = 0, 0 // wall time differs
				if !slices.Equal(g.X, got[0][i].X) || g.F != got[0][i].F || s != s0 {
					t.Errorf("np %d, %s: rank %d ended at %v (%+v), rank 0 at %v (%+v)", n, m.name, rank, g.X, g.Stats, got[0][i].X, got[0][i].Stats)
				}
			}
		}
	}
}

// fake is a Collectives of size ranks where every rank's values are the
// caller's (a rank among identical ranks), failing from call failAt on.
type fake struct {
	size, calls, failAt int
	names               []string
}

var errFake = errors.New("fake: transport failed")

type done struct{}

func (done) Wait(context.Context) error { return nil }

func (f *fake) Size() int { return f.size }

func (f *fake) AllreduceAsync(t *tensor.Tensor, name string, op tensor.ReduceOp, pre, post float64) (optim.Waiter, error) {
	f.calls++
	f.names = append(f.names, name)
	if f.failAt > 0 && f.calls >= f.failAt {
		return nil, errFake
	}
	// size identical ranks: the sum is size·pre·x.
	scale := pre * post
	if op == optim.Sum {
		scale *= float64(f.size)
	}
	v := t.Float64s()
	for i := range v {
		v[i] *= scale
	}
	return done{}, nil
}

func (f *fake) BroadcastAsync(*tensor.Tensor, int, string) (optim.Waiter, error) { return done{}, nil }

func TestShares(t *testing.T) {
	for _, c := range []struct {
		name    string
		weights []float64
		want    []float64
	}{
		{"weighted", []float64{1, 3}, []float64{0.25, 0.75}},
		{"unweighted", []float64{0, 0, 0, 0}, []float64{0.25, 0.25, 0.25, 0.25}},
		{"one rank holds all", []float64{5, 0}, []float64{1, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			shares := make([]float64, len(c.weights))
			localrun.OnRanks(t, len(c.weights), func(rank int, coll optim.Collectives) error {
				o, err := New(coll, Local{Func: func([]float64) float64 { return 0 }, Weight: c.weights[rank]})
				if err != nil {
					return err
				}
				shares[rank] = o.Share()
				return nil
			})
			for i := range shares {
				if math.Abs(shares[i]-c.want[i]) > 1e-15 {
					t.Errorf("shares %v, want %v", shares, c.want)
				}
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	f := func([]float64) float64 { return 0 }
	for _, c := range []struct {
		name  string
		local Local
		coll  *fake
	}{
		{"no Func", Local{}, &fake{size: 1}},
		{"negative weight", Local{Func: f, Weight: -1}, &fake{size: 1}},
		{"NaN weight", Local{Func: f, Weight: math.NaN()}, &fake{size: 1}},
		{"weight sum fails", Local{Func: f}, &fake{size: 1, failAt: 1}},
	} {
		if _, err := New(c.coll, c.local); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// TestCollectiveFailure: once an allreduce fails, Status stops the method
// and Minimize returns the error.
func TestCollectiveFailure(t *testing.T) {
	data := makeData(40)
	f := &fake{size: 2, failAt: 6}
	obj, err := New(f, data.local(), WithName("lr"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := minimize(obj.Problem(), &optimize.BFGS{})
	if !errors.Is(err, errFake) || !errors.Is(obj.Err(), errFake) {
		t.Fatalf("Minimize: %v, Err %v; want the transport's error", err, obj.Err())
	}
	if res.Status != optimize.Failure {
		t.Errorf("status %v, want Failure", res.Status)
	}
	if f.names[0] != "lr.weight" || !slices.Contains(f.names, "lr.func") || !slices.Contains(f.names, "lr.grad") {
		t.Errorf("collective names %q", f.names)
	}
}

// TestProblemAvailability: Grad and Hess are offered only where Local has
// them, so that gonum checks a method's needs against what exists.
func TestProblemAvailability(t *testing.T) {
	data := makeData(10)
	for _, c := range []struct {
		name       string
		local      Local
		grad, hess bool
	}{
		{"func only", Local{Func: data.Func}, false, false},
		{"with grad", Local{Func: data.Func, Grad: data.Grad}, true, false},
		{"with hess", data.local(), true, true},
	} {
		obj, err := New(&fake{size: 1}, c.local)
		if err != nil {
			t.Fatal(err)
		}
		p := obj.Problem()
		if (p.Grad != nil) != c.grad || (p.Hess != nil) != c.hess || p.Status == nil {
			t.Errorf("%s: Grad %v Hess %v Status %v", c.name, p.Grad != nil, p.Hess != nil, p.Status != nil)
		}
	}
}
