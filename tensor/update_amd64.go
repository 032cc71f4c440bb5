//go:build amd64 && !purego

package tensor

// AVX2 optimizer kernels (update_amd64.s). They process n elements, n a
// multiple of 8, with the hyper-parameters in c, and use no fused
// multiply-add, so that every element sees the float32 operations of the Go
// loops in the same order and the results are bit-identical to them.

// c: lr, wd.
//
//go:noescape
func sgdPlainF32(v, grad *float32, n int, c *[2]float32)

// c: lr, momentum, 1-dampening, wd; one kernel per (nesterov, first).
//
//go:noescape
func sgdMomF32(v, grad, b *float32, n int, c *[4]float32)

//go:noescape
func sgdMomFirstF32(v, grad, b *float32, n int, c *[4]float32)

//go:noescape
func sgdNesF32(v, grad, b *float32, n int, c *[4]float32)

//go:noescape
func sgdNesFirstF32(v, grad, b *float32, n int, c *[4]float32)

// c: wd (Adam) or 1-lr·wd (AdamW), β1, 1-β1, β2, 1-β2, step size,
// sqrt(1-β2^t), eps.
//
//go:noescape
func adamF32(v, grad, m, s *float32, n int, c *[8]float32)

//go:noescape
func adamWF32(v, grad, m, s *float32, n int, c *[8]float32)

// c: lr, α, 1-α, wd, eps, momentum; mom and avg are nil unless used
// (momentum, centered). The pointers are advanced but never dereferenced
// when nil.
//
//go:noescape
func rmsF32(v, grad, sq, mom, avg *float32, n int, c *[6]float32)

//go:noescape
func rmsCenF32(v, grad, sq, mom, avg *float32, n int, c *[6]float32)

//go:noescape
func rmsMomF32(v, grad, sq, mom, avg *float32, n int, c *[6]float32)

//go:noescape
func rmsCenMomF32(v, grad, sq, mom, avg *float32, n int, c *[6]float32)

func rmspropVec(v, g, sq, mom, avg []float32, lr, alpha, eps, mu, wd float32) int {
	n := len(v) &^ 7
	if !hasVector || n == 0 {
		return 0
	}
	_, _ = g[n-1], sq[n-1]
	var pm, pa *float32
	f := rmsF32
	if mom != nil {
		_ = mom[n-1]
		pm = &mom[0]
		f = rmsMomF32
	}
	if avg != nil {
		_ = avg[n-1]
		pa = &avg[0]
		f = rmsCenF32
		if mom != nil {
			f = rmsCenMomF32
		}
	}
	f(&v[0], &g[0], &sq[0], pm, pa, n, &[6]float32{lr, alpha, 1 - alpha, wd, eps, mu})
	return n
}

// c: clr, eps, wd.
//
//go:noescape
func adagradF32(v, grad, s *float32, n int, c *[3]float32)

func adagradVec(v, g, s []float32, clr, eps, wd float32) int {
	n := len(v) &^ 7
	if !hasVector || n == 0 {
		return 0
	}
	_, _ = g[n-1], s[n-1]
	adagradF32(&v[0], &g[0], &s[0], n, &[3]float32{clr, eps, wd})
	return n
}

func sgdPlainVec(v, g []float32, lr, wd float32) int {
	n := len(v) &^ 7
	if !hasVector || n == 0 {
		return 0
	}
	_ = g[n-1]
	sgdPlainF32(&v[0], &g[0], n, &[2]float32{lr, wd})
	return n
}

func sgdMomVec(v, g, b []float32, lr, mu, d1, wd float32, nesterov, first bool) int {
	n := len(v) &^ 7
	if !hasVector || n == 0 {
		return 0
	}
	_, _ = g[n-1], b[n-1]
	f := sgdMomF32
	switch {
	case nesterov && first:
		f = sgdNesFirstF32
	case nesterov:
		f = sgdNesF32
	case first:
		f = sgdMomFirstF32
	}
	f(&v[0], &g[0], &b[0], n, &[4]float32{lr, mu, d1, wd})
	return n
}

func adamVec(v, g, m, s []float32, lr, b1, b2, eps, wd, step, sq2 float32, decoupled bool) int {
	n := len(v) &^ 7
	if !hasVector || n == 0 {
		return 0
	}
	_, _, _ = g[n-1], m[n-1], s[n-1]
	c := [8]float32{wd, b1, 1 - b1, b2, 1 - b2, step, sq2, eps}
	if decoupled {
		c[0] = 1 - lr*wd
		adamWF32(&v[0], &g[0], &m[0], &s[0], n, &c)
	} else {
		adamF32(&v[0], &g[0], &m[0], &s[0], n, &c)
	}
	return n
}
