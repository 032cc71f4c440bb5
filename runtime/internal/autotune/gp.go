package autotune

import (
	"errors"
	"math"

	"gonum.org/v1/gonum/mat"
)

// DefaultLengthScales are the RBF length scales (in normalised input units)
// among which GP.Fit picks the one of highest log marginal likelihood when
// the GP has no fixed length scale.
var DefaultLengthScales = []float64{0.1, 0.15, 0.2, 0.3, 0.45, 0.7, 1.0}

// GP is Gaussian process regression with a squared-exponential (RBF) kernel
// k(a, b) = exp(-|a-b|²/(2ℓ²)) over inputs in [0,1]^d, with observation
// noise added to the diagonal. The targets are standardised (zero mean,
// unit variance) before fitting, so Noise is a variance in those units.
// The zero value is not usable; build one with NewGP.
type GP struct {
	// Noise is the observation-noise variance in standardised units.
	Noise float64
	// LengthScale is the RBF length scale; 0 selects one of
	// DefaultLengthScales by log marginal likelihood at each Fit.
	LengthScale float64

	x     [][]float64
	ell   float64
	ymean float64
	yscal float64
	chol  mat.Cholesky
	alpha *mat.VecDense
}

// NewGP returns an unfitted GP with the given noise variance and length
// scale (0 for automatic selection).
func NewGP(noise, lengthScale float64) *GP {
	return &GP{Noise: noise, LengthScale: lengthScale}
}

func rbf(a, b []float64, ell float64) float64 {
	var d2 float64
	for i := range a {
		d := a[i] - b[i]
		d2 += d * d
	}
	return math.Exp(-d2 / (2 * ell * ell))
}

// Fit fits the GP to inputs x (each in [0,1]^d, all of one length) and
// targets y. It fails when x is empty, the lengths differ, or the kernel
// matrix is not positive definite.
func (g *GP) Fit(x [][]float64, y []float64) error {
	n := len(x)
	if n == 0 || n != len(y) {
		return errors.New("autotune: GP.Fit needs as many targets as inputs, at least one")
	}
	var mean float64
	for _, v := range y {
		mean += v
	}
	mean /= float64(n)
	var ss float64
	for _, v := range y {
		ss += (v - mean) * (v - mean)
	}
	scale := math.Sqrt(ss / float64(n))
	if scale == 0 || math.IsNaN(scale) {
		scale = 1
	}
	ys := mat.NewVecDense(n, nil)
	for i, v := range y {
		ys.SetVec(i, (v-mean)/scale)
	}
	scales := []float64{g.LengthScale}
	if g.LengthScale <= 0 {
		scales = DefaultLengthScales
	}
	bestLL := math.Inf(-1)
	var ok bool
	for _, ell := range scales {
		var ch mat.Cholesky
		if !ch.Factorize(g.kernel(x, ell)) {
			continue
		}
		var a mat.VecDense
		if err := ch.SolveVecTo(&a, ys); err != nil {
			continue
		}
		// log p(y|X) = -½ yᵀα - ½ log|K| - n/2 log 2π.
		ll := -0.5*mat.Dot(ys, &a) - 0.5*ch.LogDet()
		if ll > bestLL {
			bestLL, ok = ll, true
			g.ell = ell
			g.chol = ch
			g.alpha = &a
		}
	}
	if !ok {
		return errors.New("autotune: GP kernel matrix is not positive definite")
	}
	g.x = make([][]float64, n)
	for i := range x {
		g.x[i] = append([]float64(nil), x[i]...)
	}
	g.ymean, g.yscal = mean, scale
	return nil
}

func (g *GP) kernel(x [][]float64, ell float64) *mat.SymDense {
	n := len(x)
	k := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			v := rbf(x[i], x[j], ell)
			if i == j {
				v += g.Noise + 1e-10
			}
			k.SetSym(i, j, v)
		}
	}
	return k
}

// Predict returns the posterior mean and standard deviation of the latent
// function at x (in [0,1]^d), in the units of the fitted targets. The
// standard deviation excludes the observation noise. Before Fit it returns
// (0, 1).
func (g *GP) Predict(x []float64) (mean, std float64) {
	if g.alpha == nil {
		return 0, 1
	}
	n := len(g.x)
	ks := mat.NewVecDense(n, nil)
	for i := range g.x {
		ks.SetVec(i, rbf(g.x[i], x, g.ell))
	}
	mu := mat.Dot(ks, g.alpha)
	var v mat.VecDense
	if err := g.chol.SolveVecTo(&v, ks); err != nil {
		return g.ymean + mu*g.yscal, g.yscal
	}
	variance := 1 - mat.Dot(ks, &v)
	if variance < 0 {
		variance = 0
	}
	return g.ymean + mu*g.yscal, math.Sqrt(variance) * g.yscal
}

// TargetScale is the standard deviation of the targets of the last
// successful Fit (1 when they were all equal), the unit of the
// standardised scale.
func (g *GP) TargetScale() float64 { return g.yscal }
