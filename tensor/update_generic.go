package tensor

import "math"

// Portable optimizer kernels (see update.go). They keep the operation order
// of optim's scalar loops so that results match them bit for bit.

func sgdPlainGo(v, g []float32, lr, wd float32) {
	g = g[:len(v)]
	for j := range v {
		v[j] -= lr * (g[j] + wd*v[j])
	}
}

func sgdMomGo(v, g, b []float32, lr, mu, d1, wd float32, nesterov, first bool) {
	g, b = g[:len(v)], b[:len(v)]
	for j := range v {
		gj := g[j] + wd*v[j]
		if first {
			b[j] = gj
		} else {
			b[j] = mu*b[j] + d1*gj
		}
		if nesterov {
			gj += mu * b[j]
		} else {
			gj = b[j]
		}
		v[j] -= lr * gj
	}
}

func adamGo(v, g, m, s []float32, lr, b1, b2, eps, wd, step, sq2 float32, decoupled bool) {
	g, m, s = g[:len(v)], m[:len(v)], s[:len(v)]
	decay := 1 - lr*wd
	for j := range v {
		gj := g[j]
		if decoupled {
			v[j] *= decay
		} else {
			gj += wd * v[j]
		}
		m[j] = b1*m[j] + (1-b1)*gj
		s[j] = b2*s[j] + (1-b2)*gj*gj
		v[j] -= step * m[j] / (sqrt32(s[j])/sq2 + eps)
	}
}

func rmspropGo(v, g, sq, mom, avg []float32, lr, alpha, eps, mu, wd float32) {
	g, sq = g[:len(v)], sq[:len(v)]
	for j := range v {
		gj := g[j] + wd*v[j]
		sq[j] = alpha*sq[j] + (1-alpha)*gj*gj
		var d float32
		if avg != nil {
			avg[j] = alpha*avg[j] + (1-alpha)*gj
			d = sqrt32(sq[j]-avg[j]*avg[j]) + eps
		} else {
			d = sqrt32(sq[j]) + eps
		}
		if mom != nil {
			mom[j] = mu*mom[j] + gj/d
			v[j] -= lr * mom[j]
		} else {
			v[j] -= lr * gj / d
		}
	}
}

func adagradGo(v, g, s []float32, clr, eps, wd float32) {
	g, s = g[:len(v)], s[:len(v)]
	for j := range v {
		gj := g[j] + wd*v[j]
		s[j] += gj * gj
		v[j] -= clr * gj / (sqrt32(s[j]) + eps)
	}
}

// sqrt32 is the correctly rounded float32 square root (the float64 root of
// a float32 rounds to the same value).
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }
