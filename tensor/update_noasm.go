//go:build !amd64 || purego

package tensor

// Without assembly the optimizer kernels are the Go loops: the vector
// prefixes are empty.

func rmspropVec(v, g, sq, mom, avg []float32, lr, alpha, eps, mu, wd float32) int { return 0 }

func adagradVec(v, g, s []float32, clr, eps, wd float32) int { return 0 }

func sgdPlainVec(v, g []float32, lr, wd float32) int { return 0 }

func sgdMomVec(v, g, b []float32, lr, mu, d1, wd float32, nesterov, first bool) int { return 0 }

func adamVec(v, g, m, s []float32, lr, b1, b2, eps, wd, step, sq2 float32, decoupled bool) int {
	return 0
}
