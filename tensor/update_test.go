package tensor

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// The reference loops below are optim's scalar updates before the fused
// kernels (sgdStep, adamStep, rmspropStep, adagradStep on float32).

func refSGD(v, g, b []float32, lr, mu, damp, wd float32, nesterov, first bool) {
	if mu == 0 {
		for j := range v {
			v[j] -= lr * (g[j] + wd*v[j])
		}
		return
	}
	for j := range v {
		gj := g[j] + wd*v[j]
		if first {
			b[j] = gj
		} else {
			b[j] = mu*b[j] + (1-damp)*gj
		}
		if nesterov {
			gj += mu * b[j]
		} else {
			gj = b[j]
		}
		v[j] -= lr * gj
	}
}

func refAdam(v, g, m, s []float32, lr64, b1, b2, eps64, wd64, t float64, decoupled bool) {
	bc1 := 1 - math.Pow(b1, t)
	bc2 := 1 - math.Pow(b2, t)
	lr, wd, eps := float32(lr64), float32(wd64), float32(eps64)
	step := float32(lr64 / bc1)
	sq2 := float32(math.Sqrt(bc2))
	tb1, tb2 := float32(b1), float32(b2)
	for j := range v {
		gj := g[j]
		if decoupled {
			v[j] *= 1 - lr*wd
		} else {
			gj += wd * v[j]
		}
		m[j] = tb1*m[j] + (1-tb1)*gj
		s[j] = tb2*s[j] + (1-tb2)*gj*gj
		v[j] -= step * m[j] / (float32(math.Sqrt(float64(s[j])))/sq2 + eps)
	}
}

func refRMSProp(v, g, sq, mom, avg []float32, lr, alpha, eps, mu, wd float32) {
	for j := range v {
		gj := g[j] + wd*v[j]
		sq[j] = alpha*sq[j] + (1-alpha)*gj*gj
		var d float32
		if avg != nil {
			avg[j] = alpha*avg[j] + (1-alpha)*gj
			d = float32(math.Sqrt(float64(sq[j]-avg[j]*avg[j]))) + eps
		} else {
			d = float32(math.Sqrt(float64(sq[j]))) + eps
		}
		if mom != nil {
			mom[j] = mu*mom[j] + gj/d
			v[j] -= lr * mom[j]
		} else {
			v[j] -= lr * gj / d
		}
	}
}

func refAdagrad(v, g, s []float32, clr, eps, wd float32) {
	for j := range v {
		gj := g[j] + wd*v[j]
		s[j] += gj * gj
		v[j] -= clr * gj / (float32(math.Sqrt(float64(s[j]))) + eps)
	}
}

var updateLens = []int{0, 1, 7, 8, 9, 31, 33, 1000, 1001}

// randVecs returns k random slices of n elements; positive ones (for
// squared-gradient state) when pos.
func randVecs(r *rand.Rand, k, n int, pos bool) [][]float32 {
	out := make([][]float32, k)
	for i := range out {
		out[i] = make([]float32, n)
		for j := range out[i] {
			x := float32(r.NormFloat64())
			if pos {
				x = x * x
			}
			out[i][j] = x
		}
	}
	return out
}

func clone32(s []float32) []float32 {
	if s == nil {
		return nil
	}
	return append([]float32(nil), s...)
}

func assertClose(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for j := range got {
		d := math.Abs(float64(got[j]) - float64(want[j]))
		if d > 1e-6*math.Max(math.Abs(float64(want[j])), 1e-30) && got[j] != want[j] {
			t.Fatalf("%s[%d] = %g, want %g", what, j, got[j], want[j])
		}
	}
}

func TestSGDUpdateF32(t *testing.T) {
	forEachKernelPath(t, func(t *testing.T) {
		r := rand.New(rand.NewSource(1))
		for _, n := range updateLens {
			for _, tc := range []struct {
				mu, damp, wd    float32
				nesterov, first bool
			}{
				{0, 0, 0, false, false},
				{0, 0, 1e-4, false, false},
				{0.9, 0, 0, false, true},
				{0.9, 0, 0, false, false},
				{0.9, 0.1, 5e-4, false, true},
				{0.9, 0.1, 5e-4, false, false},
				{0.9, 0, 5e-4, true, true},
				{0.9, 0, 5e-4, true, false},
				{0.5, 0, 0, true, false},
			} {
				name := fmt.Sprintf("n=%d/%+v", n, tc)
				x := randVecs(r, 3, n, false)
				v, g, b := x[0], x[1], x[2]
				if tc.mu == 0 {
					b = nil
				}
				wv, wb := clone32(v), clone32(b)
				refSGD(wv, g, wb, 0.1, tc.mu, tc.damp, tc.wd, tc.nesterov, tc.first)
				SGDUpdateF32(v, g, b, 0.1, tc.mu, tc.damp, tc.wd, tc.nesterov, tc.first)
				assertClose(t, name+" v", v, wv)
				assertClose(t, name+" buf", b, wb)
			}
		}
	})
}

func TestAdamUpdateF32(t *testing.T) {
	forEachKernelPath(t, func(t *testing.T) {
		r := rand.New(rand.NewSource(2))
		for _, n := range updateLens {
			for _, tc := range []struct {
				wd, step  float64
				decoupled bool
			}{
				{0, 1, false}, {0.01, 1, false}, {0.01, 7, false},
				{0, 1, true}, {0.01, 1, true}, {0.1, 30, true},
			} {
				name := fmt.Sprintf("n=%d/%+v", n, tc)
				x := randVecs(r, 3, n, false)
				v, g, m := x[0], x[1], x[2]
				s := randVecs(r, 1, n, true)[0]
				wv, wm, ws := clone32(v), clone32(m), clone32(s)
				const lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
				refAdam(wv, g, wm, ws, lr, b1, b2, eps, tc.wd, tc.step, tc.decoupled)
				stepSize := float32(lr / (1 - math.Pow(b1, tc.step)))
				sq2 := float32(math.Sqrt(1 - math.Pow(b2, tc.step)))
				AdamUpdateF32(v, g, m, s, lr, b1, b2, eps, float32(tc.wd), stepSize, sq2, tc.decoupled)
				assertClose(t, name+" v", v, wv)
				assertClose(t, name+" m", m, wm)
				assertClose(t, name+" s", s, ws)
			}
		}
	})
}

func TestRMSPropUpdateF32(t *testing.T) {
	forEachKernelPath(t, func(t *testing.T) { testRMSPropUpdateF32(t) })
}

func testRMSPropUpdateF32(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, n := range updateLens {
		for _, tc := range []struct {
			mu, wd             float32
			momentum, centered bool
		}{
			{0, 0, false, false}, {0, 1e-4, false, true},
			{0.9, 1e-4, true, false}, {0.9, 0, true, true},
		} {
			name := fmt.Sprintf("n=%d/%+v", n, tc)
			x := randVecs(r, 3, n, false)
			v, g, mom := x[0], x[1], x[2]
			sq := randVecs(r, 1, n, true)[0]
			var avg []float32
			if tc.centered {
				avg = make([]float32, n) // keeps sq - avg² positive
			}
			if !tc.momentum {
				mom = nil
			}
			wv, wsq, wmom, wavg := clone32(v), clone32(sq), clone32(mom), clone32(avg)
			refRMSProp(wv, g, wsq, wmom, wavg, 0.01, 0.99, 1e-8, tc.mu, tc.wd)
			RMSPropUpdateF32(v, g, sq, mom, avg, 0.01, 0.99, 1e-8, tc.mu, tc.wd)
			assertClose(t, name+" v", v, wv)
			assertClose(t, name+" sq", sq, wsq)
			assertClose(t, name+" mom", mom, wmom)
			assertClose(t, name+" avg", avg, wavg)
		}
	}
}

func TestAdagradUpdateF32(t *testing.T) {
	forEachKernelPath(t, func(t *testing.T) { testAdagradUpdateF32(t) })
}

func testAdagradUpdateF32(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	for _, n := range updateLens {
		for _, wd := range []float32{0, 1e-4} {
			name := fmt.Sprintf("n=%d/wd=%g", n, wd)
			x := randVecs(r, 2, n, false)
			v, g := x[0], x[1]
			s := randVecs(r, 1, n, true)[0]
			wv, ws := clone32(v), clone32(s)
			refAdagrad(wv, g, ws, 0.01, 1e-10, wd)
			AdagradUpdateF32(v, g, s, 0.01, 1e-10, wd)
			assertClose(t, name+" v", v, wv)
			assertClose(t, name+" s", s, ws)
		}
	}
}

func TestUpdateLengthMismatchPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"sgd":     func() { SGDUpdateF32(make([]float32, 3), make([]float32, 2), nil, 1, 0, 0, 0, false, false) },
		"sgd buf": func() { SGDUpdateF32(make([]float32, 3), make([]float32, 3), nil, 1, 0.9, 0, 0, false, false) },
		"adam": func() {
			AdamUpdateF32(make([]float32, 3), make([]float32, 3), nil, nil, 1, 0.9, 0.999, 1e-8, 0, 1, 1, false)
		},
		"rmsprop": func() { RMSPropUpdateF32(make([]float32, 3), make([]float32, 3), nil, nil, nil, 1, 0.99, 1e-8, 0, 0) },
		"adagrad": func() { AdagradUpdateF32(make([]float32, 3), make([]float32, 1), nil, 1, 1e-10, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic on mismatched lengths", name)
				}
			}()
			f()
		}()
	}
}
