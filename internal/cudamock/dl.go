//go:build linux && (amd64 || arm64) && !nogpu

package cudamock

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// call calls the exported function name of the loaded library at path
// (dlopen returns the handle the library under test already has).
func call(t testing.TB, path, name string, args ...uintptr) uintptr {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	defer purego.Dlclose(h)
	fn, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// Counts reads the mock CUDA runtime's counters: cudaMemcpyAsync calls,
// cudaMemcpyBatchAsync calls, the copies in them, cudaStreamWaitEvent
// calls and streams created.
func Counts(t testing.TB, cudart string) [5]int64 {
	var c [5]int64
	call(t, cudart, "mockCounts", uintptr(unsafe.Pointer(&c[0])))
	return c
}

// FailCopy makes the nth cudaMemcpyAsync from now (1: the next) in
// direction kind (AnyCopy: any) fail with the CUDA error code, once.
func FailCopy(t testing.TB, cudart string, kind, nth, code int) {
	call(t, cudart, "mockFailCopy", uintptr(kind), uintptr(nth), uintptr(code))
}

// RefuseBatch makes the mock's cudaMemcpyBatchAsync fail with the CUDA
// error code (0: work again), as a runtime does whose driver is too old.
func RefuseBatch(t testing.TB, cudart string, code int) {
	call(t, cudart, "mockRefuseBatch", uintptr(code))
}

// Source returns the sources' hash the library at path was built from.
func Source(t testing.TB, path string) string {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	defer purego.Dlclose(h)
	var source func() string
	purego.RegisterLibFunc(&source, h, "mockSource")
	return source()
}

// DriverCounts reads the mock driver's counters (the library at path,
// already loaded): modules loaded, kernel launches, copies launched,
// modules unloaded, launches of the pieces kernel, launches of the walk.
func DriverCounts(t testing.TB, path string) [6]int64 {
	var c [6]int64
	call(t, path, "mockDriverCounts", uintptr(unsafe.Pointer(&c[0])))
	return c
}

// FailLaunch makes the mock driver's cuLaunchKernel fail with code (0:
// work again).
func FailLaunch(t testing.TB, path string, code int) {
	call(t, path, "mockFailLaunch", uintptr(code))
}

// BreakKernel makes the mock driver's kernels in mask (1: the pieces
// kernel, 2: the walk) leave the last byte of each copy out (0: copy
// right again), for the tests of the kernels' check on the device.
func BreakKernel(t testing.TB, path string, mask int) {
	call(t, path, "mockBreakKernel", uintptr(mask))
}
