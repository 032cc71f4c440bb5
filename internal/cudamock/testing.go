package cudamock

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Libraries returns variant v of the mock CUDA runtime and the mock NCCL,
// fresh files in a temporary directory of t under their sonames (so that
// each test loads its own copy, with its own state): compiled with gcc
// when there is one (and GOHOROVOD_CUDAMOCK is not "prebuilt"), else this
// platform's prebuilt copies. It skips t when there is neither.
func Libraries(t testing.TB, v Variant) (cudart, nccl string) {
	t.Helper()
	dir := t.TempDir()
	cudart, nccl = filepath.Join(dir, v.Soname), filepath.Join(dir, "libnccl.so.2")
	if gcc, err := exec.LookPath("gcc"); err == nil && os.Getenv("GOHOROVOD_CUDAMOCK") != "prebuilt" {
		if err := Compile(gcc, v, cudart, nccl); err != nil {
			t.Fatal(err)
		}
		return cudart, nccl
	}
	ok, err := Prebuilt(v, cudart, nccl)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skipf("no gcc and no prebuilt mock CUDA libraries for %s", Platform())
	}
	return cudart, nccl
}

// Driver returns the directory of a fresh mock CUDA driver library, named
// libcuda.so.1 as the cuda package opens it (so a process started with the
// directory on LD_LIBRARY_PATH loads it), built with gcc; it skips t
// without gcc (there is no prebuilt copy).
func Driver(t testing.TB) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil || os.Getenv("GOHOROVOD_CUDAMOCK") == "prebuilt" {
		t.Skip("the mock CUDA driver library needs gcc")
	}
	dir := t.TempDir()
	if err := CompileDriver(gcc, filepath.Join(dir, "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	return dir
}
