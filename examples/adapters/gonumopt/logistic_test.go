package gonumopt

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"
)

// logistic is L2-regularised logistic regression on a set of samples: the
// mean over samples of log(1 + exp(-y·w·x)) plus lambda/2·|w|², strictly
// convex, with a unique minimiser.
type logistic struct {
	x      [][]float64 // samples; the last feature is a constant 1 (bias)
	y      []float64   // labels, -1 or +1
	lambda float64
}

const features = 5

// makeData draws n samples from a fixed noisy linear model.
func makeData(n int) *logistic {
	r := rand.New(rand.NewPCG(7, 11))
	truth := []float64{1.5, -2, 0.5, 1, -0.3}
	l := &logistic{lambda: 1e-2}
	for range n {
		x := make([]float64, features)
		var z float64
		for j := range features - 1 {
			x[j] = r.NormFloat64()
			z += truth[j] * x[j]
		}
		x[features-1] = 1
		z += truth[features-1]
		y := -1.0
		if z+r.NormFloat64() > 0 {
			y = 1
		}
		l.x, l.y = append(l.x, x), append(l.y, y)
	}
	return l
}

// shard returns the samples i with i mod size == rank.
func (l *logistic) shard(rank, size int) *logistic {
	s := &logistic{lambda: l.lambda}
	for i := rank; i < len(l.x); i += size {
		s.x, s.y = append(s.x, l.x[i]), append(s.y, l.y[i])
	}
	return s
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// sigmoid(t) = 1/(1+exp(-t)).
func sigmoid(t float64) float64 { return 1 / (1 + math.Exp(-t)) }

func (l *logistic) Func(w []float64) float64 {
	var s float64
	for i, x := range l.x {
		// log(1+exp(-m)), computed stably.
		m := l.y[i] * dot(w, x)
		if m > 0 {
			s += math.Log1p(math.Exp(-m))
		} else {
			s += -m + math.Log1p(math.Exp(m))
		}
	}
	return s/float64(len(l.x)) + l.lambda/2*dot(w, w)
}

func (l *logistic) Grad(g, w []float64) {
	for j := range g {
		g[j] = l.lambda * w[j]
	}
	n := float64(len(l.x))
	for i, x := range l.x {
		c := -l.y[i] * sigmoid(-l.y[i]*dot(w, x)) / n
		for j := range g {
			g[j] += c * x[j]
		}
	}
}

func (l *logistic) Hess(h *mat.SymDense, w []float64) {
	d := len(w)
	n := float64(len(l.x))
	for a := range d {
		for b := a; b < d; b++ {
			v := 0.0
			if a == b {
				v = l.lambda
			}
			h.SetSym(a, b, v)
		}
	}
	for _, x := range l.x {
		p := sigmoid(dot(w, x))
		c := p * (1 - p) / n
		for a := range d {
			for b := a; b < d; b++ {
				h.SetSym(a, b, h.At(a, b)+c*x[a]*x[b])
			}
		}
	}
}

// local returns the shard as this rank's Local, weighted by its size.
func (l *logistic) local() Local {
	return Local{Func: l.Func, Grad: l.Grad, Hess: l.Hess, Weight: float64(len(l.x))}
}

// methods are the gonum methods the tests run, with the tolerance to which
// they reach the minimiser.
var methods = []struct {
	name string
	new  func() optimize.Method
	tol  float64
}{
	{"BFGS", func() optimize.Method { return &optimize.BFGS{} }, 1e-6},
	{"LBFGS", func() optimize.Method { return &optimize.LBFGS{} }, 1e-6},
	{"CG", func() optimize.Method { return &optimize.CG{} }, 1e-6},
	{"GradientDescent", func() optimize.Method { return &optimize.GradientDescent{} }, 1e-5},
	{"Newton", func() optimize.Method { return &optimize.Newton{} }, 1e-6},
	{"NelderMead", func() optimize.Method { return &optimize.NelderMead{} }, 1e-3},
}

func settings() *optimize.Settings {
	return &optimize.Settings{GradientThreshold: 1e-8, MajorIterations: 5000,
		Converger: &optimize.FunctionConverge{Absolute: 1e-13, Iterations: 20}}
}

// minimize runs a method from the origin.
func minimize(p optimize.Problem, m optimize.Method) (*optimize.Result, error) {
	return optimize.Minimize(p, make([]float64, features), settings(), m)
}

// within reports whether got and want agree to tol, element by element.
func within(got, want []float64, tol float64) error {
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol {
			return fmt.Errorf("x[%d] = %.12g, want %.12g (tolerance %g)", i, got[i], want[i], tol)
		}
	}
	return nil
}
