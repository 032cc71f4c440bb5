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
