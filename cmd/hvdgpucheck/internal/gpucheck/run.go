package gpucheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cuda"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// Config says what Run checks.
type Config struct {
	Load   cuda.LoadConfig // where to find the libraries
	Device int
	NCCL   bool // check the NCCL path at one rank
	Elems  int  // float32 elements of the fused allreduce, in 8 tensors
	Iters  int  // timed fused allreduces
	Log    zerolog.Logger
}

// DefaultConfig checks device 0 with NCCL, 20 fused allreduces of 8 x 2
// Mi float32s (64 MiB: the staged allreduce that docs/BENCHMARKS.md sets
// a goal for).
func DefaultConfig() Config {
	return Config{Load: cuda.ConfigFromEnv(nil), NCCL: true, Elems: 16 << 20, Iters: 20, Log: zerolog.Nop()}
}

// Run performs the checks, printing each to w, and returns an error naming
// every one that failed.
func Run(w io.Writer, cfg Config) error {
	rt, err := cuda.OpenRuntime(cfg.Load)
	if err != nil {
		fmt.Fprintf(w, "FAIL load CUDA runtime: %v\n", err)
		return err
	}
	fmt.Fprintf(w, "ok   %s\n", rt.Describe())
	var errs []error
	step := func(name string, err error) {
		if err != nil {
			fmt.Fprintf(w, "FAIL %s: %v\n", name, err)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if cfg.NCCL {
		n, err := cuda.OpenNCCL(rt, cfg.Load)
		if err != nil {
			step("load NCCL", err)
		} else {
			fmt.Fprintf(w, "ok   NCCL %v (%s)\n", n.Version(), n.Path())
			step("runtime over NCCL at np 1", ranks(w, rt, cfg, 1, []hvd.Option{hvd.WithNCCL(n)}, "NCCL"))
		}
	}
	step("runtime staged through host memory at np 2 on one GPU", ranks(w, rt, cfg, 2, []hvd.Option{hvd.WithoutNCCL()}, "staged"))
	if len(errs) > 0 {
		fmt.Fprintf(w, "FAIL (%d check(s))\n", len(errs))
		return errors.Join(errs...)
	}
	fmt.Fprintln(w, "PASS")
	return nil
}

// ranks runs n runtimes over an in-memory group, each with its own stream
// on the device, and checks the collectives on every rank.
func ranks(w io.Writer, rt *cuda.Runtime, cfg Config, n int, extra []hvd.Option, what string) error {
	group := memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: time.Minute})
	defer group[0].Close()
	hc := config.Default()
	hc.CycleTime = time.Millisecond
	errs := make([]error, n)
	lines := make([]string, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			lines[r], errs[r] = rank(rt, cfg, group[r], hc, extra)
		}(r)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(w, "ok   %s at np %d: allreduce (single and 8 fused, sum and average), allgather, broadcast, alltoall, reducescatter\n", what, n)
	fmt.Fprintf(w, "     %s\n", lines[0])
	return nil
}

func rank(rt *cuda.Runtime, cfg Config, c comm.Communicator, hc config.Config, extra []hvd.Option) (string, error) {
	g, err := rt.OpenDevice(cfg.Device)
	if err != nil {
		return "", err
	}
	defer g.Close()
	var r hvd.Runtime
	opts := append([]hvd.Option{hvd.WithCommunicator(c), hvd.WithConfig(hc), hvd.WithLogger(cfg.Log), hvd.WithGPU(g)}, extra...)
	if err := r.Init(opts...); err != nil {
		return "", err
	}
	defer r.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := &onDevice{g: g}
	defer d.free()
	if err := d.singleAllreduce(ctx, &r, cfg.Elems); err != nil {
		return "", err
	}
	line, err := d.fusedAllreduce(ctx, &r, cfg)
	if err != nil {
		return "", err
	}
	return line, d.otherCollectives(ctx, &r)
}

// onDevice is one rank's device and the device tensors its checks
// allocate, freed at the end.
type onDevice struct {
	g    cuda.Device
	live []*tensor.Tensor
}

// put copies h to a new device tensor.
func (d *onDevice) put(h *tensor.Tensor) (*tensor.Tensor, error) {
	t, err := cuda.ToDevice(d.g, h)
	if err == nil {
		d.live = append(d.live, t)
	}
	return t, err
}

// check compares the device tensor t, a collective's result, with want
// element by element.
func (d *onDevice) check(what string, t *tensor.Tensor, want func(i int) float32) error {
	d.live = append(d.live, t)
	h, err := cuda.ToHost(d.g, t)
	if err != nil {
		return err
	}
	for i, v := range h.Float32s() {
		if v != want(i) {
			return fmt.Errorf("%s: element %d = %v, want %v", what, i, v, want(i))
		}
	}
	return nil
}

func (d *onDevice) free() {
	for _, t := range d.live {
		cuda.FreeTensor(d.g, t)
	}
}

// fill returns a host tensor of n float32s, element i f(i).
func fill(n int, f func(i int) float32) *tensor.Tensor {
	t := tensor.New(tensor.Float32, n)
	for i := range t.Float32s() {
		t.Float32s()[i] = f(i)
	}
	return t
}

// singleAllreduce checks one allreduce (sum) of n elements.
func (d *onDevice) singleAllreduce(ctx context.Context, r *hvd.Runtime, n int) error {
	rk, size := r.Rank(), r.Size()
	sum := float32(size * (size + 1) / 2)
	x, err := d.put(fill(n, func(i int) float32 { return float32(rk + 1) }))
	if err != nil {
		return err
	}
	out, err := r.Allreduce(ctx, x, "single", hvd.Sum)
	if err != nil {
		return err
	}
	return d.check("allreduce", out, func(int) float32 { return sum })
}

// fusedTensors is how many tensors the fused allreduce averages.
const fusedTensors = 8

// fusedAllreduce times the average of eight fused tensors on the device
// against the same of host tensors, checks both, and returns the line
// that reports the times.
func (d *onDevice) fusedAllreduce(ctx context.Context, r *hvd.Runtime, cfg Config) (string, error) {
	const k = fusedTensors
	rk := r.Rank()
	ts := make([]*tensor.Tensor, k)
	var err error
	for i := range ts {
		if ts[i], err = d.put(fill(cfg.Elems/k, func(j int) float32 { return float32(rk + i) })); err != nil {
			return "", err
		}
	}
	grp, err := r.NewAllreduceGroup(ts, names("fused", k), hvd.Average)
	if err != nil {
		return "", err
	}
	defer grp.Close()
	// The yardstick: the same allreduce of host tensors through the same
	// runtime and communicator, interleaved with the device's, so that
	// the ratio says whether the GPU's copies or the host collective
	// bound the staged path.
	hts := make([]*tensor.Tensor, k)
	for i := range hts {
		hts[i] = tensor.New(tensor.Float32, cfg.Elems/k)
	}
	hgrp, err := r.NewAllreduceGroup(hts, names("host", k), hvd.Average)
	if err != nil {
		return "", err
	}
	defer hgrp.Close()
	iters := max(cfg.Iters, 1)
	times := make([]time.Duration, 0, iters)
	htimes := make([]time.Duration, 0, iters)
	for it := 0; it < iters; it++ {
		for i, t := range ts {
			in := fill(cfg.Elems/k, func(int) float32 { return float32(rk + i) })
			if err := cuda.CopyToDevice(d.g, t, in); err != nil {
				return "", err
			}
			copy(hts[i].Float32s(), in.Float32s())
		}
		dt, err := timed(ctx, grp)
		if err != nil {
			return "", err
		}
		times = append(times, dt)
		if dt, err = timed(ctx, hgrp); err != nil {
			return "", err
		}
		htimes = append(htimes, dt)
	}
	if err := d.checkAverages(ts, hts, r.Size()); err != nil {
		return "", err
	}
	slices.Sort(times)
	slices.Sort(htimes)
	best, med, hmed := times[0], times[len(times)/2], htimes[len(htimes)/2]
	bytes := float64(k * (cfg.Elems / k) * 4)
	return fmt.Sprintf("fused allreduce of %d x %d float32 (%.1f MiB), %d runs: median %v (%.2f GB/s algbw), best %v (%.2f GB/s); cycle time included\n"+
		"     the same of host tensors (yardstick, interleaved): median %v (%.2f GB/s algbw); device/host time %.2f",
		k, cfg.Elems/k, bytes/(1<<20), len(times), med.Round(time.Microsecond), bytes/med.Seconds()/1e9, best.Round(time.Microsecond), bytes/best.Seconds()/1e9,
		hmed.Round(time.Microsecond), bytes/hmed.Seconds()/1e9, med.Seconds()/hmed.Seconds()), nil
}

// timed runs one allreduce of g and returns how long it took.
func timed(ctx context.Context, g *hvd.AllreduceGroup) (time.Duration, error) {
	t0 := time.Now()
	h, err := g.Start()
	if err != nil {
		return 0, err
	}
	if err := h.Wait(ctx); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// checkAverages checks the fused averages over size ranks of the device
// tensors ts and the host tensors hts (rank r's tensor i held r+i).
func (d *onDevice) checkAverages(ts, hts []*tensor.Tensor, size int) error {
	for i, t := range ts {
		h, err := cuda.ToHost(d.g, t)
		if err != nil {
			return err
		}
		want := float32(size-1)/2 + float32(i)
		if got := h.Float32s()[0]; got != want {
			return fmt.Errorf("fused average: tensor %d = %v, want %v", i, got, want)
		}
		if got := hts[i].Float32s()[len(hts[i].Float32s())-1]; got != want {
			return fmt.Errorf("host fused average: tensor %d = %v, want %v", i, got, want)
		}
	}
	return nil
}

// otherCollectives checks allgather, broadcast, alltoall and
// reducescatter.
func (d *onDevice) otherCollectives(ctx context.Context, r *hvd.Runtime) error {
	rk, size := r.Rank(), r.Size()
	a, err := d.put(fill(4, func(int) float32 { return float32(rk) }))
	if err != nil {
		return err
	}
	out, err := r.Allgather(ctx, a, "ag")
	if err != nil {
		return err
	}
	if err := d.check("allgather", out, func(i int) float32 { return float32(i / 4) }); err != nil {
		return err
	}
	if out, err = r.Broadcast(ctx, a, size-1, "bc"); err != nil {
		return err
	}
	if err := d.check("broadcast", out, func(int) float32 { return float32(size - 1) }); err != nil {
		return err
	}
	b, err := d.put(fill(2*size, func(i int) float32 { return float32(10*rk + i/2) }))
	if err != nil {
		return err
	}
	if out, _, err = r.Alltoall(ctx, b, nil, "a2a"); err != nil {
		return err
	}
	if err := d.check("alltoall", out, func(i int) float32 { return float32(10*(i/2) + rk) }); err != nil {
		return err
	}
	if out, err = r.Reducescatter(ctx, b, "rs", hvd.Sum); err != nil {
		return err
	}
	base := float32(10 * size * (size - 1) / 2)
	return d.check("reducescatter", out, func(int) float32 { return base + float32(size*rk) })
}

func names(prefix string, k int) []string {
	s := make([]string, k)
	for i := range s {
		s[i] = fmt.Sprintf("%s.%d", prefix, i)
	}
	return s
}
