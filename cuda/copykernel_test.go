//go:build linux && (amd64 || arm64) && !nogpu

package cuda_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/cuda/internal/gpucheck"
	"github.com/gohorovod/gohorovod/internal/cudamock"
)

// mockDriverEnv names the mock driver library in the child process of
// TestCopyKernel.
const mockDriverEnv = "GOHOROVOD_TEST_MOCK_DRIVER"

// TestCopyKernel runs the fusion buffer's copies through the copy kernel,
// against the mock driver library (internal/cudamock's mockcuda.c, which
// checks the PTX's entry point and parameters and performs each launch's
// copies on the host). The cuda package opens the driver as libcuda.so.1,
// so the test runs itself again with the mock's directory on
// LD_LIBRARY_PATH.
//
// gpucheck's device contract copies 300 pieces of every alignment with one
// CopyDtoDBatch: three launches (128, 128 and 44 copies) and no
// cudaMemcpyBatchAsync. A launch the driver refuses sends that batch and
// the later ones to cudaMemcpyBatchAsync, with the reason kept; Close
// unloads the module.
func TestCopyKernel(t *testing.T) {
	driver := os.Getenv(mockDriverEnv)
	if driver == "" {
		dir := cudamock.Driver(t)
		cmd := exec.Command(os.Args[0], "-test.run", "^TestCopyKernel$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, mockDriverEnv+"="+filepath.Join(dir, "libcuda.so.1"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestCopyKernel") {
			t.Fatalf("the test with the mock driver: %v\n%s", err, out)
		}
		return
	}
	g, cudart := mockDevice(t, cudamock.CUDA130, 0)
	must(t, gpucheck.CheckDevice(g))
	if err := g.CopyKernelRefused(); err != nil {
		t.Fatalf("the copy kernel was refused: %v", err)
	}
	if c := cudamock.DriverCounts(t, driver); c[0] != 1 || c[1] != 3 || c[2] != 300 {
		t.Errorf("mock driver: %d modules, %d launches of %d copies; want 1, 3 of 300", c[0], c[1], c[2])
	}
	if c := cudamock.Counts(t, cudart); c[1] != 0 {
		t.Errorf("%d cudaMemcpyBatchAsync calls beside the kernel", c[1])
	}

	// The driver refuses a launch: the batch goes through
	// cudaMemcpyBatchAsync, correctly, and so do the next ones.
	cudamock.FailLaunch(t, driver, 1)
	must(t, gpucheck.CheckDevice(g))
	if err := g.CopyKernelRefused(); err == nil || !strings.Contains(err.Error(), "cuLaunchKernel") {
		t.Errorf("CopyKernelRefused = %v, want the launch's error", err)
	}
	cudamock.FailLaunch(t, driver, 0)
	must(t, gpucheck.CheckDevice(g))
	if c := cudamock.Counts(t, cudart); c[1] != 2 {
		t.Errorf("%d cudaMemcpyBatchAsync calls after the kernel was refused, want 2", c[1])
	}
	if c := cudamock.DriverCounts(t, driver); c[1] != 3 {
		t.Errorf("%d launches in all, want the first 3 only", c[1])
	}
	must(t, g.Close())
	if c := cudamock.DriverCounts(t, driver); c[3] != 1 {
		t.Errorf("%d modules unloaded at Close, want 1", c[3])
	}
}
