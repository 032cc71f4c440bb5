//go:build !amd64 || purego

package tensor

import "testing"

// forEachKernelPath runs f with the portable Go kernels, the only ones here.
func forEachKernelPath(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	t.Run("go", f)
}
