// Command gpucheck verifies CUDA and NCCL support on a machine with a GPU in
// one run: it loads the libraries (as GOHOROVOD_CUDART_PATH,
// GOHOROVOD_NCCL_PATH, LD_LIBRARY_PATH and the usual paths say), checks the
// device contract, prints device-copy bandwidth against a fusion copy of
// ResNet-50's 161 tensors and host-device bandwidth, and runs NCCL
// collectives at one rank. It exits 1 if any step fails.
//
// Build it on a machine with Go and copy the binary over (the GPU machine
// needs no Go, CUDA toolkit or MPI, only the driver and the libraries,
// e.g. from the nvidia-cuda-runtime-cu12 and nvidia-nccl-cu12 wheels):
//
//	go build -o gpucheck ./cuda/cmd/gpucheck
//	./gpucheck -device 0 -iters 20
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gohorovod/gohorovod/cuda/internal/gpucheck"
)

func main() {
	cfg := gpucheck.DefaultConfig()
	flag.IntVar(&cfg.Device, "device", cfg.Device, "CUDA device index")
	flag.IntVar(&cfg.Iters, "iters", cfg.Iters, "timed iterations per measurement")
	flag.IntVar(&cfg.HostBytes, "bytes", cfg.HostBytes, "bytes per host<->device copy and per NCCL allreduce")
	flag.BoolVar(&cfg.NCCL, "nccl", cfg.NCCL, "also check NCCL")
	flag.Parse()
	if err := gpucheck.Run(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		os.Exit(1)
	}
}
