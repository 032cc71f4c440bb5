//go:build linux && (amd64 || arm64) && !nogpu

package cuda_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/cuda/internal/gpucheck"
	"github.com/gohorovod/gohorovod/internal/cudamock"
)

// mockDriverEnv names the mock driver library in the child process of
// TestCopyKernel.
const mockDriverEnv = "GOHOROVOD_TEST_MOCK_DRIVER"

// TestCopyKernel runs the fusion buffer's copies through the copy kernels,
// against the mock driver library (internal/cudamock's mockcuda.c, which
// checks the PTX's entry points and parameters, checks that a launch of
// the pieces kernel has one block per piece, and performs each launch's
// copies on the host as the kernel would). The cuda package opens the
// driver as libcuda.so.1, so the test runs itself again with the mock's
// directory on LD_LIBRARY_PATH.
//
// At the first batch the kernels are loaded and the pieces kernel is
// checked on the device (150 copies, 137 of them not empty: two
// launches); gpucheck's device contract then copies 300 pieces of every
// alignment with one CopyDtoDBatch: three launches (128, 128 and 44
// copies) and no cudaMemcpyBatchAsync. A launch the driver refuses sends
// that batch and the later ones to cudaMemcpyBatchAsync, with the reason
// kept; Close unloads the module. A kernel that copies wrongly fails its
// check and is never used: the walk takes over from a wrong pieces
// kernel, and cudaMemcpyBatchAsync from two wrong ones.
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
	if k, err := g.CopyKernelInUse(); k != cuda.CopyKernelPieces || err != nil {
		t.Errorf("CopyKernelInUse = %v, %v; want pieces", k, err)
	}
	for _, k := range []cuda.CopyKernelKind{cuda.CopyKernelPieces, cuda.CopyKernelWalk} {
		if err := g.CopyKernelFailed(k); err != nil {
			t.Errorf("CopyKernelFailed(%v) = %v", k, err)
		}
	}
	if c := cudamock.DriverCounts(t, driver); c[0] != 1 || c[4] != 2+3 || c[5] != 0 || c[2] != 137+300 {
		t.Errorf("mock driver: %d modules, %d launches of the pieces kernel and %d of the walk, %d copies; want 1, 5, 0 and 437", c[0], c[4], c[5], c[2])
	}
	if c := cudamock.Counts(t, cudart); c[1] != 0 {
		t.Errorf("%d cudaMemcpyBatchAsync calls beside the kernel", c[1])
	}

	// gpucheck's fusion copy measures the kernel in use and the other one
	// beside it, both checked.
	res, err := gpucheck.FusionCopy(g, []int{100, 1 << 17, 3, 4096}, 1)
	must(t, err)
	var names []string
	for _, r := range res {
		names = append(names, r.Name)
	}
	for _, want := range []string{"fusion copy in (4 tensors, copy kernel pieces)", "fusion copy in (4 tensors, copy kernel walk)",
		"fusion copy out (4 tensors, copy kernel pieces)", "fusion copy out (4 tensors, copy kernel walk)"} {
		if !slices.Contains(names, want) {
			t.Errorf("gpucheck's fusion copy rows lack %q: %q", want, names)
		}
	}
	walks := cudamock.DriverCounts(t, driver)[5]

	// The walk on demand (gpucheck measures the two), through the contract's
	// checked copies: 3 launches.
	walkOnly := &kernelDevice{GPU: g, kind: cuda.CopyKernelWalk}
	must(t, gpucheck.CheckDevice(walkOnly))
	if c := cudamock.DriverCounts(t, driver); c[5] != walks+3 {
		t.Errorf("%d launches of the walk on demand, want 3", c[5]-walks)
	}

	// The driver refuses a launch: the batch goes through
	// cudaMemcpyBatchAsync, correctly, and so do the next ones.
	cudamock.FailLaunch(t, driver, 1)
	must(t, gpucheck.CheckDevice(g))
	if err := g.CopyKernelRefused(); err == nil || !strings.Contains(err.Error(), "cuLaunchKernel") {
		t.Errorf("CopyKernelRefused = %v, want the launch's error", err)
	}
	batches := cudamock.Counts(t, cudart)[1]
	launches := cudamock.DriverCounts(t, driver)[1]
	cudamock.FailLaunch(t, driver, 0)
	must(t, gpucheck.CheckDevice(g))
	if c := cudamock.Counts(t, cudart); c[1] != batches+1 {
		t.Errorf("%d cudaMemcpyBatchAsync calls after the kernel was refused, want 1", c[1]-batches)
	}
	if c := cudamock.DriverCounts(t, driver); c[1] != launches {
		t.Errorf("%d launches after the kernel was refused", c[1]-launches)
	}
	must(t, g.Close())
	if c := cudamock.DriverCounts(t, driver); c[3] != 1 {
		t.Errorf("%d modules unloaded at Close, want 1", c[3])
	}

	// A pieces kernel that copies wrongly on this device fails its check:
	// the walk is checked and used instead.
	cudamock.BreakKernel(t, driver, 1)
	g1, _ := mockDevice(t, cudamock.CUDA130, 1)
	must(t, gpucheck.CheckDevice(g1))
	if k, err := g1.CopyKernelInUse(); k != cuda.CopyKernelWalk || err != nil {
		t.Errorf("with a wrong pieces kernel, CopyKernelInUse = %v, %v; want walk", k, err)
	}
	if err := g1.CopyKernelFailed(cuda.CopyKernelPieces); err == nil || !strings.Contains(err.Error(), "failed its check") {
		t.Errorf("CopyKernelFailed(pieces) = %v, want its check's failure", err)
	}
	if err := g1.CopyDtoDKernelOf(cuda.CopyKernelPieces, nil, nil, nil); err == nil {
		t.Error("CopyDtoDKernelOf launched the pieces kernel that failed its check")
	}

	// Both wrong: no kernel is used, and the copies still arrive right.
	cudamock.BreakKernel(t, driver, 3)
	g2, cudart2 := mockDevice(t, cudamock.CUDA130, 0)
	before := cudamock.Counts(t, cudart2)[1]
	must(t, gpucheck.CheckDevice(g2))
	if err := g2.CopyKernelRefused(); err == nil || !strings.Contains(err.Error(), "no copy kernel passed its check") {
		t.Errorf("with both kernels wrong, CopyKernelRefused = %v", err)
	}
	if c := cudamock.Counts(t, cudart2); c[1] == before {
		t.Error("with both kernels wrong, the contract's batch did not go through cudaMemcpyBatchAsync")
	}
	cudamock.BreakKernel(t, driver, 0)
}

// kernelDevice is a GPU whose batches go through one given copy kernel.
type kernelDevice struct {
	*cuda.GPU
	kind cuda.CopyKernelKind
}

func (d *kernelDevice) CopyDtoDBatch(dsts, srcs []uintptr, sizes []int) error {
	return d.GPU.CopyDtoDKernelOf(d.kind, dsts, srcs, sizes)
}
