//go:build !mpi && !nogpu

package gpucheck

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cuda"
)

// TestRunAgainstMocks runs the whole check through the real loader (purego) and
// the runtime's NCCL adapter against the cuda package's mock libraries
// (device memory is host memory there; the mock NCCL has one rank).
func TestRunAgainstMocks(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	cudart, nccl := filepath.Join(dir, "libcudart.so.12"), filepath.Join(dir, "libnccl.so.2")
	for _, b := range [][2]string{{"../../../../cuda/testdata/mockcudart.c", cudart}, {"../../../../cuda/testdata/mocknccl.c", nccl}} {
		if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", b[1], b[0]).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", b[1], err, out)
		}
	}
	var out bytes.Buffer
	cfg := Config{Load: cuda.LoadConfig{CudartPath: cudart, NCCLPath: nccl}, Device: 1, NCCL: true, Elems: 1 << 10, Iters: 2, Log: zerolog.Nop()}
	if err := Run(&out, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"ok   NCCL 2.21.5", "ok   NCCL at np 1", "ok   staged at np 2", "PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}
