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
	flag.IntVar(&cfg.Elems, "elems", cfg.Elems, "float32 elements of the timed fused allreduce (8 tensors)")
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
