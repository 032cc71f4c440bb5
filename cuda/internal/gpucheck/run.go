package gpucheck

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gohorovod/gohorovod/cuda"
)

// Config says what Run checks.
type Config struct {
	Load      cuda.LoadConfig // where to find the libraries
	Device    int             // the device to use
	Iters     int             // timed iterations per measurement
	HostBytes int             // size of the host<->device copies
	NCCL      bool            // also check NCCL
	// Sizes are the tensors of the fusion copy (ResNet50Sizes when nil).
	Sizes []int
}

// DefaultConfig checks device 0 with NCCL, 20 iterations, 64 MiB host
// copies and ResNet-50's tensors, loading the libraries as the environment
// says.
func DefaultConfig() Config {
	return Config{Load: cuda.ConfigFromEnv(nil), Iters: 20, HostBytes: 64 << 20, NCCL: true}
}

// Run loads the CUDA runtime (and NCCL), checks the device contract,
// measures copy bandwidths and checks NCCL, printing each step to w. It
// returns an error naming every step that failed.
func Run(w io.Writer, cfg Config) error {
	start := time.Now()
	rt, err := cuda.OpenRuntime(cfg.Load)
	if err != nil {
		fmt.Fprintf(w, "FAIL load CUDA runtime: %v\n", err)
		return err
	}
	fmt.Fprintf(w, "ok   %s\n", rt.Describe())
	g, err := rt.OpenDevice(cfg.Device)
	if err != nil {
		fmt.Fprintf(w, "FAIL open device %d: %v\n", cfg.Device, err)
		return err
	}
	var errs []error
	fail := func(step string, err error) {
		fmt.Fprintf(w, "FAIL %s: %v\n", step, err)
		errs = append(errs, fmt.Errorf("%s: %w", step, err))
	}
	if err := CheckDevice(g); err != nil {
		fail("device contract", err)
	} else {
		fmt.Fprintf(w, "ok   device contract (alloc, copies in every direction, memset, stream order, pinned memory, staging in pieces, tensors)\n")
	}
	sizes := cfg.Sizes
	if sizes == nil {
		sizes = ResNet50Sizes()
	}
	if res, err := FusionCopy(g, sizes, cfg.Iters); err != nil {
		fail("fusion copy", err)
	} else {
		for _, r := range res {
			fmt.Fprintf(w, "     %v\n", r)
		}
		if err := g.CopyKernelRefused(); err != nil {
			fmt.Fprintf(w, "note the copy kernel is not used (%v): the fusion copies go through cudaMemcpyBatchAsync or streams\n", err)
		} else {
			for _, k := range []cuda.CopyKernelKind{cuda.CopyKernelPieces, cuda.CopyKernelWalk} {
				if err := g.CopyKernelFailed(k); err != nil {
					fmt.Fprintf(w, "note the copy kernel %v is not used: %v\n", k, err)
				}
			}
		}
		if err := g.BatchRefused(); err != nil {
			fmt.Fprintf(w, "note the runtime refused cudaMemcpyBatchAsync (%v): the rows that name it measured the copies spread over %d streams\n",
				err, cuda.FanOutStreams)
		}
	}
	if res, err := HostCopy(g, cfg.HostBytes, cfg.Iters); err != nil {
		fail("host copies", err)
	} else {
		for _, r := range res {
			fmt.Fprintf(w, "     %v\n", r)
		}
	}
	if cfg.NCCL {
		n, err := cuda.OpenNCCL(rt, cfg.Load)
		if err != nil {
			fail("load NCCL", err)
		} else {
			fmt.Fprintf(w, "ok   NCCL %v (%s)\n", n.Version(), n.Path())
			if r, err := CheckNCCL(n, g, cfg.HostBytes, cfg.Iters); err != nil {
				fail("NCCL collectives at one rank", err)
			} else {
				fmt.Fprintf(w, "ok   NCCL allreduce/allgather/broadcast/reducescatter/alltoall at one rank, every dtype\n")
				fmt.Fprintf(w, "     %v\n", r)
			}
		}
	}
	if err := g.Close(); err != nil {
		fail("close device", err)
	}
	if len(errs) > 0 {
		fmt.Fprintf(w, "FAIL (%d step(s), %s)\n", len(errs), elapsed(time.Since(start)))
		return errors.Join(errs...)
	}
	fmt.Fprintf(w, "PASS (%s)\n", elapsed(time.Since(start)))
	return nil
}
