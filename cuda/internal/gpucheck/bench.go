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
	s := fmt.Sprintf("%-50s %9.1f MiB %5d copies %10v %8.2f GB/s", r.Name, float64(r.Bytes)/(1<<20), r.Copies, r.Median.Round(time.Microsecond), r.GBPerS)
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

// FusionCopy measures, for the tensors of the given byte sizes (each its
// own allocation): one plain device-to-device copy of their total size;
// packing them into one fusion buffer (offsets aligned to 256 bytes) and
// unpacking them again, as the runtime does, with one
// Device.CopyDtoDBatch each way (cudaMemcpyBatchAsync from CUDA 12.8, else
// the copies spread over cuda.FanOutStreams streams); and the same with a
// copy call per tensor, as the runtime did before. The fusion copies'
// speedup is relative to the plain copy (below 1: slower; the goal on an
// H100 is 0.6 or more for ResNet-50's 161 tensors).
func FusionCopy(d cuda.Device, sizes []int, iters int) (res []Result, err error) {
	var ptrs []uintptr
	defer func() {
		for _, p := range ptrs {
			if ferr := d.Free(p); ferr != nil && err == nil {
				err = ferr
			}
		}
	}()
	alloc := func(n int) (uintptr, error) {
		p, err := d.Alloc(n)
		if err == nil && p != 0 {
			ptrs = append(ptrs, p)
		}
		return p, err
	}
	var total int64
	offs := make([]int, len(sizes))
	tensors := make([]uintptr, len(sizes))
	fused := 0
	for i, n := range sizes {
		total += int64(n)
		offs[i] = fused
		fused += (n + 255) &^ 255
		if tensors[i], err = alloc(n); err != nil {
			return nil, err
		}
		if err := d.Memset(tensors[i], byte(i), n); err != nil {
			return nil, err
		}
	}
	src, err := alloc(int(total))
	if err != nil {
		return nil, err
	}
	dst, err := alloc(fused)
	if err != nil {
		return nil, err
	}
	plain, err := timeIt(d, iters, func() error { return d.CopyDtoD(dst, src, int(total)) })
	if err != nil {
		return nil, err
	}
	fusedAt := make([]uintptr, len(sizes))
	for i := range sizes {
		fusedAt[i] = dst + uintptr(offs[i])
	}
	pack, err := timeIt(d, iters, func() error { return d.CopyDtoDBatch(fusedAt, tensors, sizes) })
	if err != nil {
		return nil, err
	}
	packEach, err := timeIt(d, iters, func() error {
		for i, n := range sizes {
			if err := d.CopyDtoD(fusedAt[i], tensors[i], n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The packed buffer must hold every tensor at its offset.
	for i, n := range sizes {
		probe := make([]byte, 1)
		if err := d.CopyDtoH(probe, dst+uintptr(offs[i]+n-1)); err != nil {
			return nil, err
		}
		if err := d.Sync(); err != nil {
			return nil, err
		}
		if probe[0] != byte(i) {
			return nil, fmt.Errorf("fusion buffer: tensor %d's last byte is %d, want %d", i, probe[0], byte(i))
		}
	}
	for i := range sizes {
		if err := d.Memset(tensors[i], 0, sizes[i]); err != nil {
			return nil, err
		}
	}
	unpack, err := timeIt(d, iters, func() error { return d.CopyDtoDBatch(tensors, fusedAt, sizes) })
	if err != nil {
		return nil, err
	}
	// Every tensor must be back from its offset.
	for i, n := range sizes {
		probe := make([]byte, 1)
		if err := d.CopyDtoH(probe, tensors[i]+uintptr(n-1)); err != nil {
			return nil, err
		}
		if err := d.Sync(); err != nil {
			return nil, err
		}
		if probe[0] != byte(i) {
			return nil, fmt.Errorf("fusion copy out: tensor %d's last byte is %d, want %d", i, probe[0], byte(i))
		}
	}
	unpackEach, err := timeIt(d, iters, func() error {
		for i, n := range sizes {
			if err := d.CopyDtoD(tensors[i], fusedAt[i], n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	how := "batched"
	if g, ok := d.(*cuda.GPU); ok {
		if g.Runtime().HasMemcpyBatch() {
			how = "cudaMemcpyBatchAsync"
		} else {
			how = fmt.Sprintf("%d streams", cuda.FanOutStreams)
		}
	}
	p := result("device copy, one buffer", total, 1, plain)
	res = []Result{p}
	for _, r := range []struct {
		what string
		t    time.Duration
	}{
		{fmt.Sprintf("fusion copy in (%d tensors, %s)", len(sizes), how), pack},
		{fmt.Sprintf("fusion copy out (%d tensors, %s)", len(sizes), how), unpack},
		{fmt.Sprintf("fusion copy in (%d tensors, a call each)", len(sizes)), packEach},
		{fmt.Sprintf("fusion copy out (%d tensors, a call each)", len(sizes)), unpackEach},
	} {
		x := result(r.what, total, len(sizes), r.t)
		x.Speedup = float64(plain) / float64(r.t)
		res = append(res, x)
	}
	return res, nil
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
