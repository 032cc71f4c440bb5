//go:build amd64 && !purego

package tensor

import "testing"

// forEachKernelPath runs f with the vector kernels (when the CPU has them)
// and again with the portable Go kernels.
func forEachKernelPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := hasVector
	defer func() { hasVector = saved }()
	if saved {
		t.Run("vector", f)
	}
	hasVector = false
	t.Run("go", f)
}
