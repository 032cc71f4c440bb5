package autotune

import (
	"math"
	"math/rand"

	"gonum.org/v1/gonum/stat/distuv"
)

var stdNormal = distuv.UnitNormal

// ExpectedImprovement is the expected amount by which a point whose
// prediction is (mean, std) improves on best by more than xi, for
// maximisation: (mean-best-xi)·Φ(z) + std·φ(z) with z = (mean-best-xi)/std,
// and max(mean-best-xi, 0) when std is 0.
func ExpectedImprovement(mean, std, best, xi float64) float64 {
	imp := mean - best - xi
	if std <= 0 {
		return math.Max(imp, 0)
	}
	z := imp / std
	ei := imp*stdNormal.CDF(z) + std*stdNormal.Prob(z)
	return math.Max(ei, 0)
}

// EI search effort used by MaximizeEI.
const (
	// EICandidates is the number of uniformly random candidates.
	EICandidates = 2000
	// EIRefineStarts is the number of best candidates refined locally.
	EIRefineStarts = 5
	// EIRefineSteps is the number of step halvings of the local search.
	EIRefineSteps = 12
)

// MaximizeEI returns a point of [0,1]^d that (approximately) maximises the
// expected improvement of gp's prediction over best: EICandidates uniform
// random candidates drawn from rng, then a coordinate pattern search with
// halving steps from the EIRefineStarts best of them. It is deterministic
// for a given rng state.
func MaximizeEI(gp *GP, d int, best, xi float64, rng *rand.Rand) []float64 {
	ei := func(x []float64) float64 {
		m, s := gp.Predict(x)
		return ExpectedImprovement(m, s, best, xi)
	}
	type cand struct {
		x  []float64
		ei float64
	}
	top := make([]cand, 0, EIRefineStarts+1)
	for i := 0; i < EICandidates; i++ {
		x := make([]float64, d)
		for j := range x {
			x[j] = rng.Float64()
		}
		c := cand{x, ei(x)}
		// Keep the EIRefineStarts best, sorted descending (insertion).
		k := len(top)
		top = append(top, c)
		for k > 0 && top[k-1].ei < c.ei {
			top[k] = top[k-1]
			k--
		}
		top[k] = c
		if len(top) > EIRefineStarts {
			top = top[:EIRefineStarts]
		}
	}
	best0 := top[0]
	for _, c := range top {
		x, v := append([]float64(nil), c.x...), c.ei
		step := 0.05
		for s := 0; s < EIRefineSteps; s++ {
			improved := false
			for j := 0; j < d; j++ {
				for _, dir := range []float64{-1, 1} {
					y := append([]float64(nil), x...)
					y[j] = math.Min(1, math.Max(0, y[j]+dir*step))
					if w := ei(y); w > v {
						x, v, improved = y, w, true
					}
				}
			}
			if !improved {
				step /= 2
			}
		}
		if v > best0.ei {
			best0 = cand{x, v}
		}
	}
	return best0.x
}
