// Command hvdgpucheck verifies the runtime's GPU paths on a machine with a
// GPU: NCCL allreduce (single and fused), allgather, broadcast, alltoall
// and reducescatter at one rank, and the same collectives staged through
// pinned host memory at two ranks sharing one GPU over the in-memory
// communicator, checking every result. Device-copy and fusion-copy
// bandwidth are measured by cuda/cmd/gpucheck. Build it here and copy the
// binary over (the GPU machine needs only the driver and the libraries):
//
//	go build -o hvdgpucheck ./cmd/hvdgpucheck
//	./hvdgpucheck -device 0
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cmd/hvdgpucheck/internal/gpucheck"
)

func main() {
	cfg := gpucheck.DefaultConfig()
	flag.IntVar(&cfg.Device, "device", cfg.Device, "CUDA device index")
	flag.IntVar(&cfg.Elems, "elems", cfg.Elems, "float32 elements per allreduce")
	flag.IntVar(&cfg.Iters, "iters", cfg.Iters, "timed fused allreduces")
	flag.BoolVar(&cfg.NCCL, "nccl", cfg.NCCL, "check the NCCL path")
	debug := flag.Bool("debug", false, "log the runtime's path choices (debug level)")
	flag.Parse()
	if *debug {
		cfg.Log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(zerolog.DebugLevel)
	}
	if err := gpucheck.Run(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "hvdgpucheck:", err)
		os.Exit(1)
	}
}
