package tensor

import "fmt"

// Fused optimizer updates on float32 parameters. Each kernel makes one pass
// over memory, reading and writing every slice once, and computes, element
// by element and in the same order of float32 operations, exactly what the
// scalar loops of package optim compute (PyTorch's update rules). On amd64
// with AVX2 (and without the purego build tag) they run 256-bit vector loops
// without fused multiply-adds, so their results are bit-identical to the Go
// loops, which finish the tails and serve other platforms.
//
// Every kernel panics if the slices differ in length: these are programmer
// errors in a hot loop.

// SGDUpdateF32 applies one step of SGD to the parameters v with gradients g:
//
//	gj = g + wd·v
//	buf = gj                          (first)
//	buf = momentum·buf + (1-dampening)·gj  (later steps)
//	gj = gj + momentum·buf (nesterov) or gj = buf
//	v = v - lr·gj
//
// With momentum 0 buf is not used (it may be nil) and the update is
// v = v - lr·(g + wd·v).
func SGDUpdateF32(v, g, buf []float32, lr, momentum, dampening, wd float32, nesterov, first bool) {
	checkLens("SGDUpdateF32", len(v), len(g))
	if momentum == 0 {
		n := sgdPlainVec(v, g, lr, wd)
		sgdPlainGo(v[n:], g[n:], lr, wd)
		return
	}
	checkLens("SGDUpdateF32", len(v), len(buf))
	d1 := 1 - dampening
	n := sgdMomVec(v, g, buf, lr, momentum, d1, wd, nesterov, first)
	sgdMomGo(v[n:], g[n:], buf[n:], lr, momentum, d1, wd, nesterov, first)
}

// AdamUpdateF32 applies one step of Adam (decoupled false: weight decay as
// an L2 penalty added to the gradient) or AdamW (decoupled true: v scaled by
// 1-lr·wd first) to the parameters v with gradients g and the moment
// estimates m and s:
//
//	v = v·(1 - lr·wd)      (decoupled)
//	gj = g + wd·v          (otherwise)
//	m = β1·m + (1-β1)·gj
//	s = β2·s + (1-β2)·gj·gj
//	v = v - stepSize·m / (sqrt(s)/bc2Sqrt + eps)
//
// stepSize is lr/(1-β1^t) and bc2Sqrt is sqrt(1-β2^t) at step t (from 1),
// both computed by the caller in float64 and rounded once, as optim does.
func AdamUpdateF32(v, g, m, s []float32, lr, beta1, beta2, eps, wd, stepSize, bc2Sqrt float32, decoupled bool) {
	checkLens("AdamUpdateF32", len(v), len(g))
	checkLens("AdamUpdateF32", len(v), len(m))
	checkLens("AdamUpdateF32", len(v), len(s))
	n := adamVec(v, g, m, s, lr, beta1, beta2, eps, wd, stepSize, bc2Sqrt, decoupled)
	adamGo(v[n:], g[n:], m[n:], s[n:], lr, beta1, beta2, eps, wd, stepSize, bc2Sqrt, decoupled)
}

// RMSPropUpdateF32 applies one step of RMSProp to the parameters v with
// gradients g and the squared-gradient average sq:
//
//	gj = g + wd·v
//	sq = α·sq + (1-α)·gj·gj
//	avg = α·avg + (1-α)·gj; d = sqrt(sq - avg·avg) + eps  (avg not nil: centered)
//	d = sqrt(sq) + eps                                    (otherwise)
//	mom = μ·mom + gj/d; v = v - lr·mom                    (mom not nil)
//	v = v - lr·gj/d                                       (otherwise)
func RMSPropUpdateF32(v, g, sq, mom, avg []float32, lr, alpha, eps, momentum, wd float32) {
	checkLens("RMSPropUpdateF32", len(v), len(g))
	checkLens("RMSPropUpdateF32", len(v), len(sq))
	if mom != nil {
		checkLens("RMSPropUpdateF32", len(v), len(mom))
	}
	if avg != nil {
		checkLens("RMSPropUpdateF32", len(v), len(avg))
	}
	n := rmspropVec(v, g, sq, mom, avg, lr, alpha, eps, momentum, wd)
	rmspropGo(v[n:], g[n:], sq[n:], part32(mom, n), part32(avg, n), lr, alpha, eps, momentum, wd)
}

// AdagradUpdateF32 applies one step of Adagrad to the parameters v with
// gradients g and the squared-gradient sum s, clr being the decayed
// learning rate lr/(1+(t-1)·lr_decay):
//
//	gj = g + wd·v
//	s = s + gj·gj
//	v = v - clr·gj/(sqrt(s) + eps)
func AdagradUpdateF32(v, g, s []float32, clr, eps, wd float32) {
	checkLens("AdagradUpdateF32", len(v), len(g))
	checkLens("AdagradUpdateF32", len(v), len(s))
	n := adagradVec(v, g, s, clr, eps, wd)
	adagradGo(v[n:], g[n:], s[n:], clr, eps, wd)
}

// part32 returns s[n:], or nil for a nil s.
func part32(s []float32, n int) []float32 {
	if s == nil {
		return nil
	}
	return s[n:]
}

func checkLens(name string, a, b int) {
	if a != b {
		panic(fmt.Sprintf("tensor: %s of slices of %d and %d elements", name, a, b))
	}
}
