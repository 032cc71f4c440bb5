package gpucheck

import (
	"fmt"
	"sort"
	"time"

	"github.com/gohorovod/gohorovod/cuda"
)

// Result is one bandwidth measurement.
type Result struct {
	Name    string
	Bytes   int64         // bytes moved per iteration
	Copies  int           // copies per iteration
	Median  time.Duration // median over iterations, each ended by a Sync
	GBPerS  float64       // Bytes / Median, in 1e9 bytes per second
	Speedup float64       // relative to the first result of its group (0 for the first)
}

// String implements fmt.Stringer.
func (r Result) String() string {
	s := fmt.Sprintf("%-56s %9.1f MiB %5d copies %10v %8.2f GB/s", r.Name, float64(r.Bytes)/(1<<20), r.Copies, r.Median.Round(time.Microsecond), r.GBPerS)
	if r.Speedup != 0 {
		s += fmt.Sprintf("  %.2fx plain", r.Speedup)
	}
	return s
}

// ResNet50Sizes returns the byte sizes of ResNet-50's 161 float32 gradient
// tensors (53 convolution kernels, 53 batch-norm scale and offset pairs,
// the classifier's weights and bias: 25.6 million parameters, 97.5 MiB), in
// the order the layers are built.
func ResNet50Sizes() []int {
	var s []int
	conv := func(k, in, out int) { s = append(s, 4*k*k*in*out) }
	bn := func(c int) { s = append(s, 4*c, 4*c) }
	conv(7, 3, 64)
	bn(64)
	in := 64
	for _, st := range []struct{ mid, out, blocks int }{{64, 256, 3}, {128, 512, 4}, {256, 1024, 6}, {512, 2048, 3}} {
		for b := 0; b < st.blocks; b++ {
			conv(1, in, st.mid)
			bn(st.mid)
			conv(3, st.mid, st.mid)
			bn(st.mid)
			conv(1, st.mid, st.out)
			bn(st.out)
			if b == 0 {
				conv(1, in, st.out)
				bn(st.out)
			}
			in = st.out
		}
	}
	s = append(s, 4*2048*1000, 4*1000)
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func timeIt(d cuda.Device, iters int, body func() error) (time.Duration, error) {
	if err := body(); err != nil { // warm-up
		return 0, err
	}
	if err := d.Sync(); err != nil {
		return 0, err
	}
	times := make([]time.Duration, iters)
	for i := range times {
		start := time.Now()
		if err := body(); err != nil {
			return 0, err
		}
		if err := d.Sync(); err != nil {
			return 0, err
		}
		times[i] = time.Since(start)
	}
	return median(times), nil
}

func result(name string, bytes int64, copies int, t time.Duration) Result {
	return Result{Name: name, Bytes: bytes, Copies: copies, Median: t, GBPerS: float64(bytes) / t.Seconds() / 1e9}
}

// SpreadStreams are the stream counts FusionCopy measures the fallback
// of the batched copy (GPU.CopyDtoDSpread) at.
var SpreadStreams = []int{1, 2, 4, 8}

// FusionCopy measures, for the tensors of the given byte sizes (each its
// own allocation): one plain device-to-device copy of their total size
// (the yardstick); packing them into one fusion buffer (offsets aligned
// to 256 bytes) and unpacking them again with one Device.CopyDtoDBatch
// each way, as the runtime does (on a *cuda.GPU: the copy kernel in use,
// else cudaMemcpyBatchAsync from CUDA 12.8, else the copies spread over
// cuda.FanOutStreams streams); on a *cuda.GPU, also the other copy kernel
// where it passed its check, cudaMemcpyBatchAsync beside a kernel, and,
// where the runtime has the batch call, its fallback, the copies spread
// over each of SpreadStreams streams, so that each way is chosen by
// measurement; and a copy call per tensor on the device's stream, as the
// runtime did before. Each result's Speedup is relative to the plain copy
// (below 1: slower; the goal is 0.6 or more for ResNet-50's 161 tensors,
// in and out). Every packed and unpacked tensor is checked.
func FusionCopy(d cuda.Device, sizes []int, iters int) (res []Result, err error) {
	m := &deviceMem{d: d}
	defer func() {
		if ferr := m.free(); err == nil {
			err = ferr
		}
	}()
	f, err := newFusionBench(m, sizes, iters)
	if err != nil {
		return nil, err
	}
	batch := func(dsts, srcs []uintptr) error { return d.CopyDtoDBatch(dsts, srcs, sizes) }
	each := func(dsts, srcs []uintptr) error {
		for i, n := range sizes {
			if err := d.CopyDtoD(dsts[i], srcs[i], n); err != nil {
				return err
			}
		}
		return nil
	}
	g, _ := d.(*cuda.GPU)
	kernel := false
	var inUse cuda.CopyKernelKind
	if g != nil {
		// Loads and checks the copy kernels, or finds them refused.
		k, err := g.CopyKernelInUse()
		kernel, inUse = err == nil, k
	}
	how := "batched"
	switch {
	case kernel:
		how = fmt.Sprintf("copy kernel %v", inUse)
	case g != nil && g.Runtime().HasMemcpyBatch():
		how = "cudaMemcpyBatchAsync"
	case g != nil:
		how = fmt.Sprintf("%d streams, no cudaMemcpyBatchAsync", cuda.FanOutStreams)
	}
	k := len(sizes)
	for _, dir := range []struct {
		name string
		in   bool
	}{{"in", true}, {"out", false}} {
		if err := f.measure(fmt.Sprintf("fusion copy %s (%d tensors, %s)", dir.name, k, how), dir.in, batch); err != nil {
			return nil, err
		}
		if g != nil {
			if err := f.measureGPU(g, dir.name, dir.in, kernel, inUse); err != nil {
				return nil, err
			}
		}
		if err := f.measure(fmt.Sprintf("fusion copy %s (%d tensors, a call each)", dir.name, k), dir.in, each); err != nil {
			return nil, err
		}
	}
	return f.res, nil
}

// fusionBench is FusionCopy's set-up: a device allocation per tensor, a
// source of their total size, and the fusion buffer; and the results so
// far, the plain copy's first.
type fusionBench struct {
	d       cuda.Device
	sizes   []int
	iters   int
	total   int64
	tensors []uintptr // each tensor's allocation
	fusedAt []uintptr // each tensor's place in the fusion buffer
	plain   time.Duration
	res     []Result
}

// newFusionBench allocates the tensors and the buffers, and times the
// plain copy of the tensors' total size (the yardstick).
func newFusionBench(m *deviceMem, sizes []int, iters int) (*fusionBench, error) {
	f := &fusionBench{d: m.d, sizes: sizes, iters: iters, tensors: make([]uintptr, len(sizes)), fusedAt: make([]uintptr, len(sizes))}
	offs := make([]int, len(sizes))
	fused := 0
	var err error
	for i, n := range sizes {
		f.total += int64(n)
		offs[i] = fused
		fused += (n + 255) &^ 255
		if f.tensors[i], err = m.alloc(n); err != nil {
			return nil, err
		}
	}
	src, err := m.alloc(int(f.total))
	if err != nil {
		return nil, err
	}
	dst, err := m.alloc(fused)
	if err != nil {
		return nil, err
	}
	for i := range sizes {
		f.fusedAt[i] = dst + uintptr(offs[i])
	}
	if f.plain, err = timeIt(f.d, iters, func() error { return f.d.CopyDtoD(dst, src, int(f.total)) }); err != nil {
		return nil, err
	}
	f.res = []Result{result("device copy, one buffer", f.total, 1, f.plain)}
	return f, nil
}

// measure times packing (in) or unpacking (out) with copy, after setting
// the sources to a pattern and the destinations to zero, checks every
// tensor's first and last byte afterwards, and adds the result.
func (f *fusionBench) measure(what string, in bool, copy func(dsts, srcs []uintptr) error) error {
	d := f.d
	dsts, srcs := f.fusedAt, f.tensors
	if !in {
		dsts, srcs = f.tensors, f.fusedAt
	}
	for i, n := range f.sizes {
		if err := d.Memset(srcs[i], byte(i+1), n); err != nil {
			return err
		}
		if err := d.Memset(dsts[i], 0, n); err != nil {
			return err
		}
	}
	t, err := timeIt(d, f.iters, func() error { return copy(dsts, srcs) })
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	probe := make([]byte, 1)
	for i, n := range f.sizes {
		for _, at := range []int{0, n - 1} {
			if n == 0 {
				continue
			}
			if err := d.CopyDtoH(probe, dsts[i]+uintptr(at)); err != nil {
				return err
			}
			if err := d.Sync(); err != nil {
				return err
			}
			if probe[0] != byte(i+1) {
				return fmt.Errorf("%s: tensor %d's byte %d is %d, want %d", what, i, at, probe[0], byte(i+1))
			}
		}
	}
	x := result(what, f.total, len(f.sizes), t)
	x.Speedup = float64(f.plain) / float64(t)
	f.res = append(f.res, x)
	return nil
}

// measureGPU measures, in direction dir, the ways a *cuda.GPU has beside
// the one in use: the other copy kernel where it passed its check,
// cudaMemcpyBatchAsync beside a kernel, and, where the runtime has the
// batch call, its fallback over each of SpreadStreams streams.
func (f *fusionBench) measureGPU(g *cuda.GPU, dir string, in, kernel bool, inUse cuda.CopyKernelKind) error {
	k, sizes := len(f.sizes), f.sizes
	for _, other := range []cuda.CopyKernelKind{cuda.CopyKernelPieces, cuda.CopyKernelWalk} {
		if !kernel || other == inUse || g.CopyKernelFailed(other) != nil {
			continue
		}
		launch := func(dsts, srcs []uintptr) error { return g.CopyDtoDKernelOf(other, dsts, srcs, sizes) }
		if err := f.measure(fmt.Sprintf("fusion copy %s (%d tensors, copy kernel %v)", dir, k, other), in, launch); err != nil {
			return err
		}
	}
	if !g.Runtime().HasMemcpyBatch() {
		return nil
	}
	if kernel {
		memcpyBatch := func(dsts, srcs []uintptr) error { return g.CopyDtoDMemcpyBatch(dsts, srcs, sizes) }
		if err := f.measure(fmt.Sprintf("fusion copy %s (%d tensors, cudaMemcpyBatchAsync)", dir, k), in, memcpyBatch); err != nil {
			return err
		}
	}
	for _, streams := range SpreadStreams {
		spread := func(dsts, srcs []uintptr) error { return g.CopyDtoDSpread(dsts, srcs, sizes, streams) }
		if err := f.measure(fmt.Sprintf("fusion copy %s (%d tensors, %d stream%s)", dir, k, streams, plural(streams)), in, spread); err != nil {
			return err
		}
	}
	return nil
}

// HostCopy measures host-to-device and device-to-host copies of n bytes
// from ordinary (pageable) Go memory and from pinned memory (AllocHost).
func HostCopy(d cuda.Device, n, iters int) (res []Result, err error) {
	p, err := d.Alloc(n)
	if err != nil {
		return nil, err
	}
	defer func() {
		if ferr := d.Free(p); ferr != nil && err == nil {
			err = ferr
		}
	}()
	pageable := make([]byte, n)
	pinned, err := d.AllocHost(n)
	if err != nil {
		return nil, err
	}
	defer func() {
		if ferr := d.FreeHost(pinned); ferr != nil && err == nil {
			err = ferr
		}
	}()
	for _, c := range []struct {
		name string
		buf  []byte
		h2d  bool
	}{
		{"host to device, pageable", pageable, true},
		{"host to device, pinned", pinned, true},
		{"device to host, pageable", pageable, false},
		{"device to host, pinned", pinned, false},
	} {
		t, err := timeIt(d, iters, func() error {
			if c.h2d {
				return d.CopyHtoD(p, c.buf)
			}
			return d.CopyDtoH(c.buf, p)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		res = append(res, result(c.name, int64(n), 1, t))
	}
	return res, nil
}
