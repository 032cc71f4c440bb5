//go:build !mpi && !nogpu

package gpucheck

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/internal/cudamock"
)

// TestRunAgainstMocks runs the whole check through the real loader (purego) and
// the runtime's NCCL adapter against the mock libraries of internal/cudamock
// (device memory is host memory there; the mock NCCL has one rank).
func TestRunAgainstMocks(t *testing.T) {
	cudart, nccl := cudamock.Libraries(t, cudamock.CUDA124)
	var out bytes.Buffer
	cfg := Config{Load: cuda.LoadConfig{CudartPath: cudart, NCCLPath: nccl}, Device: 1, NCCL: true, Elems: 1 << 10, Iters: 2, Log: zerolog.Nop()}
	if err := Run(&out, cfg); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"ok   NCCL 2.21.5", "ok   NCCL at np 1", "ok   staged at np 2", "fused allreduce of 8 x 128 float32 (0.0 MiB), 2 runs: median ", "GB/s algbw), best ", "the same of host tensors (yardstick, interleaved): median ", "device/host time ", "PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}
