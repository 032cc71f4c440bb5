package cuda_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/cuda/internal/gpucheck"
	"github.com/gohorovod/gohorovod/tensor"
)

func TestFakeDeviceContract(t *testing.T) {
	for _, eager := range []bool{false, true} {
		f := cuda.NewFake(cuda.FakeConfig{Ordinal: 3, Eager: eager})
		if err := gpucheck.CheckDevice(f); err != nil {
			t.Errorf("eager=%v: %v", eager, err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("eager=%v: Close after the contract check: %v", eager, err)
		}
	}
}

func TestFakeHoldsWorkUntilSync(t *testing.T) {
	f := cuda.NewFake(cuda.FakeConfig{})
	p, err := f.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	in := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	out := make([]byte, 8)
	if err := f.CopyHtoD(p, in); err != nil {
		t.Fatal(err)
	}
	if err := f.CopyDtoH(out, p); err != nil {
		t.Fatal(err)
	}
	if got := f.Pending(); got != 2 {
		t.Errorf("Pending before Sync = %d, want 2", got)
	}
	if !bytes.Equal(out, make([]byte, 8)) {
		t.Errorf("destination written before Sync: %v", out)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, in) || f.Pending() != 0 {
		t.Errorf("after Sync: out %v, pending %d; want %v, 0", out, f.Pending(), in)
	}
	// Free waits for queued work, as cudaFree does.
	if err := f.Memset(p, 9, 8); err != nil {
		t.Fatal(err)
	}
	view, err := f.Bytes(p, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Free(p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(view, bytes.Repeat([]byte{9}, 8)) {
		t.Errorf("Free did not run the queued memset first: %v", view)
	}
}

func TestFakeErrors(t *testing.T) {
	newDev := func(t *testing.T) (*cuda.Fake, uintptr) {
		f := cuda.NewFake(cuda.FakeConfig{MemoryLimit: 1 << 20})
		p, err := f.Alloc(1024)
		if err != nil {
			t.Fatal(err)
		}
		return f, p
	}
	tests := []struct {
		name string
		op   func(f *cuda.Fake, p uintptr) error
		want string
	}{
		{"copy past the end", func(f *cuda.Fake, p uintptr) error { return f.CopyHtoD(p+1000, make([]byte, 25)) }, "run past the end"},
		{"read past the end", func(f *cuda.Fake, p uintptr) error { return f.CopyDtoH(make([]byte, 1025), p) }, "run past the end"},
		{"device copy source outside", func(f *cuda.Fake, p uintptr) error { return f.CopyDtoD(p, p+4096, 4) }, "source"},
		{"memset outside", func(f *cuda.Fake, p uintptr) error { return f.Memset(p-1, 0, 4) }, "not in a live allocation"},
		{"use after free", func(f *cuda.Fake, p uintptr) error {
			if err := f.Free(p); err != nil {
				return nil
			}
			return f.CopyHtoD(p, []byte{1})
		}, "not in a live allocation"},
		{"free of an interior address", func(f *cuda.Fake, p uintptr) error { return f.Free(p + 8) }, "not the start"},
		{"double free", func(f *cuda.Fake, p uintptr) error {
			if err := f.Free(p); err != nil {
				return nil
			}
			return f.Free(p)
		}, "not the start"},
		{"out of memory", func(f *cuda.Fake, p uintptr) error { _, err := f.Alloc(1 << 20); return err }, "out of memory"},
		{"negative size", func(f *cuda.Fake, p uintptr) error { _, err := f.Alloc(-1); return err }, "-1 bytes"},
		{"free host of Go memory", func(f *cuda.Fake, p uintptr) error { return f.FreeHost(make([]byte, 8)) }, "not the start"},
		{"use after close", func(f *cuda.Fake, p uintptr) error {
			_ = f.Close()
			return f.CopyHtoD(p, []byte{1})
		}, "closed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, p := newDev(t)
			err := tc.op(f, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestFakeOutOfMemoryIsACUDAError(t *testing.T) {
	f := cuda.NewFake(cuda.FakeConfig{MemoryLimit: 100})
	_, err := f.Alloc(101)
	var cerr *cuda.Error
	if !errors.As(err, &cerr) || cerr.Name != "cudaErrorMemoryAllocation" || cerr.Code != 2 {
		t.Fatalf("Alloc beyond the limit: %v, want a *cuda.Error with cudaErrorMemoryAllocation", err)
	}
	if errors.Is(err, cuda.ErrUnavailable) {
		t.Errorf("out of memory must not read as 'GPU unavailable'")
	}
}

func TestFakeCloseReportsLeaks(t *testing.T) {
	f := cuda.NewFake(cuda.FakeConfig{Ordinal: 1})
	if _, err := f.Alloc(300); err != nil {
		t.Fatal(err)
	}
	if _, err := f.AllocHost(40); err != nil {
		t.Fatal(err)
	}
	err := f.Close()
	if err == nil || !strings.Contains(err.Error(), "1 device allocations (300 bytes) and 1 host buffers (40 bytes)") {
		t.Errorf("Close with live memory: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestFakeStats(t *testing.T) {
	f := cuda.NewFake(cuda.FakeConfig{})
	a, _ := f.Alloc(100)
	b, _ := f.Alloc(50)
	h, _ := f.AllocHost(100)
	must(t, f.CopyHtoD(a, h))
	must(t, f.CopyDtoD(b, a, 50))
	must(t, f.CopyDtoH(h[:50], b))
	must(t, f.Memset(a, 0, 10))
	must(t, f.Sync())
	must(t, f.Free(b))
	got := f.Stats()
	want := cuda.FakeStats{Allocs: 2, Frees: 1, LiveAllocs: 1, LiveBytes: 100, PeakBytes: 150, HostAllocs: 1, LiveHostAllocs: 1,
		HtoD: 1, DtoH: 1, DtoD: 1, HtoDBytes: 100, DtoHBytes: 50, DtoDBytes: 50, Memsets: 1, Syncs: 1}
	if got != want {
		t.Errorf("Stats = %+v\nwant    %+v", got, want)
	}
	must(t, f.Free(a))
	must(t, f.FreeHost(h))
	must(t, f.Close())
}

func TestFakeAddressesAreDistinctAndAligned(t *testing.T) {
	f := cuda.NewFake(cuda.FakeConfig{})
	seen := map[uintptr]bool{}
	var ps []uintptr
	for _, n := range []int{1, 7, 256, 4096, 1 << 16, 3} {
		p, err := f.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if p%256 != 0 || seen[p] {
			t.Errorf("Alloc(%d) = %#x: misaligned or reused", n, p)
		}
		seen[p] = true
		ps = append(ps, p)
		b, _ := f.Bytes(p, n)
		for i := range b {
			b[i] = byte(n)
		}
	}
	// Writing every allocation in full left the others intact.
	for i, n := range []int{1, 7, 256, 4096, 1 << 16, 3} {
		b, _ := f.Bytes(ps[i], n)
		if !bytes.Equal(b, bytes.Repeat([]byte{byte(n)}, n)) {
			t.Errorf("allocation %d overlapped another", i)
		}
		must(t, f.Free(ps[i]))
	}
	must(t, f.Close())
}

func TestTensorConversions(t *testing.T) {
	f := cuda.NewFake(cuda.FakeConfig{Ordinal: 2})
	for _, dt := range tensor.DTypes() {
		h := tensor.New(dt, 3, 5)
		for i := range h.Bytes() {
			h.Bytes()[i] = byte(i * 7)
		}
		d, err := cuda.ToDevice(f, h)
		if err != nil {
			t.Fatal(err)
		}
		if d.Device() != (tensor.Device{Kind: tensor.GPU, Index: 2}) || !d.Shape().Equal(h.Shape()) || d.DType() != dt {
			t.Errorf("%v: device tensor %v", dt, d)
		}
		back, err := cuda.ToHost(f, d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back.Bytes(), h.Bytes()) {
			t.Errorf("%v: round trip changed the data", dt)
		}
		// Rows of a device tensor copy the right slice.
		row := tensor.New(dt, 1, 5)
		must(t, cuda.CopyToHost(f, row, d.Rows(1, 2)))
		if !bytes.Equal(row.Bytes(), h.Rows(1, 2).Bytes()) {
			t.Errorf("%v: row 1 of the device tensor is wrong", dt)
		}
		must(t, cuda.CopyToDevice(f, d.Rows(0, 1), row))
		must(t, cuda.CopyToHost(f, back, d))
		if !bytes.Equal(back.Rows(0, 1).Bytes(), h.Rows(1, 2).Bytes()) {
			t.Errorf("%v: CopyToDevice into row 0 did not land", dt)
		}
		must(t, cuda.FreeTensor(f, d))
	}
	host := tensor.New(tensor.Float32, 4)
	other := tensor.NewDevice(tensor.Float32, tensor.Device{Kind: tensor.GPU, Index: 0}, 0x1000, 4)
	for _, err := range []error{
		func() error { _, err := cuda.ToHost(f, host); return err }(),
		func() error { _, err := cuda.ToHost(f, other); return err }(),
		func() error { _, err := cuda.ToDevice(f, other); return err }(),
		cuda.CopyToHost(f, tensor.New(tensor.Float32, 3), other),
	} {
		if err == nil {
			t.Errorf("conversion of a tensor that is not on this device succeeded")
		}
	}
	must(t, f.Close())
}

func TestFusionCopyOnFake(t *testing.T) {
	f := cuda.NewFake(cuda.FakeConfig{})
	res, err := gpucheck.FusionCopy(f, []int{100, 4096, 3, 1 << 16}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5 || res[1].Copies != 4 || res[0].Bytes != 100+4096+3+1<<16 {
		t.Errorf("results %v", res)
	}
	if _, err := gpucheck.HostCopy(f, 1<<16, 3); err != nil {
		t.Fatal(err)
	}
	must(t, f.Close())
}

func TestResNet50Sizes(t *testing.T) {
	s := gpucheck.ResNet50Sizes()
	total := 0
	for _, n := range s {
		total += n
	}
	// ResNet-50 has 161 trainable tensors and 25,557,032 parameters.
	if len(s) != 161 || total != 4*25557032 {
		t.Errorf("%d tensors, %d bytes; want 161, %d", len(s), total, 4*25557032)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
