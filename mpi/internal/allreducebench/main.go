package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/mpi"
	"github.com/gohorovod/gohorovod/tensor"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "allreducebench:", err)
		mpi.Finalize()
		os.Exit(1)
	}
	if err := mpi.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "allreducebench:", err)
		os.Exit(1)
	}
}

func run() error {
	sizes := flag.String("bytes", "4,67108864", "comma-separated buffer sizes in bytes")
	iters := flag.Int("iters", 0, "timed iterations (0: 2000 below 1 MiB, 20 above)")
	warmup := flag.Int("warmup", 3, "untimed iterations first")
	flag.Parse()
	if err := mpi.Init(); err != nil {
		return err
	}
	w, err := mpi.World()
	if err != nil {
		return err
	}
	for _, s := range strings.Split(*sizes, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || b < 4 {
			return fmt.Errorf("bad size %q", s)
		}
		n := *iters
		if n == 0 {
			n = 2000
			if b > 1<<20 {
				n = 20
			}
		}
		buf := tensor.New(tensor.Float32, b/4)
		for i := range buf.Float32s() {
			buf.Float32s()[i] = 1
		}
		for _, check := range []bool{true, false} {
			w.SetCheck(check)
			if err := measure(w, buf, check, n, *warmup); err != nil {
				return err
			}
		}
	}
	return nil
}

func measure(w *mpi.Comm, buf *tensor.Tensor, check bool, iters, warmup int) error {
	times := make([]float64, 0, iters)
	worst := tensor.FromFloat64([]float64{0})
	w.SetCheck(false)
	defer w.SetCheck(true)
	for it := -warmup; it < iters; it++ {
		if err := w.Barrier(); err != nil {
			return err
		}
		w.SetCheck(check)
		t0 := mpi.Time()
		err := w.Allreduce(buf, tensor.Sum)
		dt := mpi.Time() - t0
		w.SetCheck(false)
		if err != nil {
			return err
		}
		worst.Float64s()[0] = dt
		if err := w.Allreduce(worst, tensor.Max); err != nil {
			return err
		}
		if it >= 0 {
			times = append(times, worst.Float64s()[0])
		}
	}
	slices.Sort(times)
	if w.Rank() == 0 {
		bytes := float64(buf.NumBytes())
		med := times[iters/2]
		alg := bytes / med / 1e9
		bus := alg
		if n := float64(w.Size()); n > 1 {
			bus = alg * 2 * (n - 1) / n
		}
		on := map[bool]string{true: "on", false: "off"}[check]
		fmt.Printf("mode=go-binding check=%s bytes=%.0f ranks=%d iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f algbw_GBps=%.3f busbw_GBps=%.3f median_us=%.2f\n",
			on, bytes, w.Size(), iters, med*1e3, times[0]*1e3, times[iters-1]*1e3, alg, bus, med*1e6)
	}
	return nil
}
