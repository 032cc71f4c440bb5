package autotune

import (
	"math"
	"math/rand"
	"testing"
)

func TestGPInterpolates(t *testing.T) {
	x := [][]float64{{0.1, 0.2}, {0.5, 0.5}, {0.9, 0.3}, {0.3, 0.8}, {0.7, 0.9}}
	f := func(u []float64) float64 { return 3*math.Sin(3*u[0]) + 2*u[1]*u[1] + 10 }
	y := make([]float64, len(x))
	for i := range x {
		y[i] = f(x[i])
	}
	for _, tc := range []struct {
		name string
		ell  float64
	}{{"fixed length scale", 0.3}, {"selected length scale", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewGP(1e-8, tc.ell)
			if err := g.Fit(x, y); err != nil {
				t.Fatal(err)
			}
			for i := range x {
				m, s := g.Predict(x[i])
				if math.Abs(m-y[i]) > 1e-3 {
					t.Errorf("mean at %v = %v, want %v", x[i], m, y[i])
				}
				if s > 1e-2 {
					t.Errorf("std at training point %v = %v, want ~0", x[i], s)
				}
			}
			_, far := g.Predict([]float64{10, 10})
			if far < 0.5*g.TargetScale() {
				t.Errorf("std far away = %v, want near the prior %v", far, g.TargetScale())
			}
		})
	}
}

func TestGPFitErrors(t *testing.T) {
	g := NewGP(0.1, 0)
	if err := g.Fit(nil, nil); err == nil {
		t.Error("empty fit: no error")
	}
	if err := g.Fit([][]float64{{0}}, []float64{1, 2}); err == nil {
		t.Error("mismatched fit: no error")
	}
	if m, s := g.Predict([]float64{0.5}); m != 0 || s != 1 {
		t.Errorf("unfitted predict = %v, %v, want 0, 1", m, s)
	}
}

func TestExpectedImprovement(t *testing.T) {
	for _, tc := range []struct {
		name                string
		mean, std, best, xi float64
		check               func(float64) bool
	}{
		{"no std, below best", 1, 0, 2, 0, func(v float64) bool { return v == 0 }},
		{"tiny std, far below best", 1, 1e-6, 2, 0, func(v float64) bool { return v < 1e-12 }},
		{"no std, above best", 3, 0, 2, 0, func(v float64) bool { return v == 1 }},
		{"above best", 3, 0.5, 2, 0, func(v float64) bool { return v >= 1 }},
		{"at best, uncertain", 2, 1, 2, 0, func(v float64) bool { return math.Abs(v-1/math.Sqrt(2*math.Pi)) < 1e-12 }},
		{"below best, uncertain", 1, 1, 2, 0, func(v float64) bool { return v > 0 && v < 0.1 }},
		{"xi lowers EI", 3, 0.5, 2, 0.5, func(v float64) bool { return v > 0.5 && v < 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v := ExpectedImprovement(tc.mean, tc.std, tc.best, tc.xi); !tc.check(v) {
				t.Errorf("EI(%v, %v, %v, %v) = %v", tc.mean, tc.std, tc.best, tc.xi, v)
			}
		})
	}
}

func TestMaximizeEIDeterministicAndExplores(t *testing.T) {
	x := [][]float64{{0.1}, {0.2}, {0.3}}
	y := []float64{1, 2, 3} // rising towards the unexplored right
	g := NewGP(1e-6, 0.2)
	if err := g.Fit(x, y); err != nil {
		t.Fatal(err)
	}
	a := MaximizeEI(g, 1, 3, 0.01, rand.New(rand.NewSource(1)))
	b := MaximizeEI(g, 1, 3, 0.01, rand.New(rand.NewSource(1)))
	if a[0] != b[0] {
		t.Errorf("not deterministic: %v vs %v", a, b)
	}
	if a[0] < 0.3 || a[0] > 1 {
		t.Errorf("next point %v, want beyond the best sample 0.3", a)
	}
}
