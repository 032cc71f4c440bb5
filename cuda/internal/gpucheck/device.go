package gpucheck

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/tensor"
)

// pattern fills b with a sequence that differs at every offset mod 251.
func pattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte((i + seed) % 251)
	}
}

// CheckDevice runs the Device contract against d and returns the first
// violation. It frees everything it allocates.
func CheckDevice(d cuda.Device) (err error) {
	m := &deviceMem{d: d}
	defer func() {
		if ferr := m.free(); err == nil {
			err = ferr
		}
	}()
	// Zero sizes are no-ops.
	if p, err := d.Alloc(0); err != nil || p != 0 {
		return fmt.Errorf("Alloc(0) = %#x, %v; want 0, nil", p, err)
	}
	if err := d.Free(0); err != nil {
		return fmt.Errorf("Free(0): %v", err)
	}
	const n = 1<<20 + 3
	a, err := m.roundTrip(n)
	if err != nil {
		return err
	}
	b, err := m.deviceToDevice(a, n)
	if err != nil {
		return err
	}
	if err := m.memset(b); err != nil {
		return err
	}
	h1, err := m.pinned(b, n)
	if err != nil {
		return err
	}
	// Staging in pieces, the last one shorter: every piece reaches fn in
	// order and comes back changed; a failing piece stops the rest.
	if err := checkStage(d, b, h1); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	// Batched copies (the fusion buffer's): more copies than one copy
	// kernel launch takes, of sizes and at offsets that allow 16-byte,
	// 4-byte and only 1-byte words, each followed by a byte that must stay
	// untouched.
	if err := checkBatch(d, m.alloc); err != nil {
		return fmt.Errorf("CopyDtoDBatch: %w", err)
	}
	if err := checkTensors(d); err != nil {
		return err
	}
	// Misuse is an error, not a crash.
	if err := d.FreeHost(make([]byte, 64)); err == nil {
		return fmt.Errorf("FreeHost of Go memory succeeded")
	}
	return nil
}

// deviceMem is the device and pinned host memory that CheckDevice's steps
// allocate, freed at the end.
type deviceMem struct {
	d     cuda.Device
	ptrs  []uintptr
	hosts [][]byte
}

func (m *deviceMem) alloc(n int) (uintptr, error) {
	p, err := m.d.Alloc(n)
	if err == nil && p != 0 {
		m.ptrs = append(m.ptrs, p)
	}
	return p, err
}

func (m *deviceMem) allocHost(n int) ([]byte, error) {
	h, err := m.d.AllocHost(n)
	if err != nil {
		return nil, fmt.Errorf("alloc host: %w", err)
	}
	m.hosts = append(m.hosts, h)
	return h, nil
}

// free frees everything allocated and returns the first error.
func (m *deviceMem) free() (err error) {
	for _, p := range m.ptrs {
		if ferr := m.d.Free(p); ferr != nil && err == nil {
			err = fmt.Errorf("free: %w", ferr)
		}
	}
	for _, h := range m.hosts {
		if ferr := m.d.FreeHost(h); ferr != nil && err == nil {
			err = fmt.Errorf("free host: %w", ferr)
		}
	}
	return err
}

func (m *deviceMem) sync(what string) error {
	if err := m.d.Sync(); err != nil {
		return fmt.Errorf("%s: sync: %w", what, err)
	}
	return nil
}

// roundTrip sends n bytes (an odd size) through new device memory, which
// it returns, and back.
func (m *deviceMem) roundTrip(n int) (uintptr, error) {
	a, err := m.alloc(n)
	if err != nil {
		return 0, fmt.Errorf("alloc: %w", err)
	}
	if a%256 != 0 {
		return 0, fmt.Errorf("Alloc returned %#x, not aligned to 256 bytes", a)
	}
	in := make([]byte, n)
	pattern(in, 1)
	out := make([]byte, n)
	if err := m.d.CopyHtoD(a, in); err != nil {
		return 0, fmt.Errorf("copy host to device: %w", err)
	}
	if err := m.d.CopyDtoH(out, a); err != nil {
		return 0, fmt.Errorf("copy device to host: %w", err)
	}
	if err := m.sync("round trip"); err != nil {
		return 0, err
	}
	if !bytes.Equal(in, out) {
		return 0, fmt.Errorf("round trip host->device->host changed the data")
	}
	return a, nil
}

// deviceToDevice copies from a (n bytes) to new device memory, which it
// returns, at unaligned offsets, queued behind the copy that fills the
// source and ahead of the one that reads the result: one sync at the end
// must see them in order.
func (m *deviceMem) deviceToDevice(a uintptr, n int) (uintptr, error) {
	b, err := m.alloc(n)
	if err != nil {
		return 0, fmt.Errorf("alloc: %w", err)
	}
	in := make([]byte, n)
	pattern(in, 7)
	if err := m.d.CopyHtoD(a, in); err != nil {
		return 0, err
	}
	if err := m.d.CopyDtoD(b+7, a+100, 5000); err != nil {
		return 0, fmt.Errorf("copy device to device: %w", err)
	}
	got := make([]byte, 5000)
	if err := m.d.CopyDtoH(got, b+7); err != nil {
		return 0, err
	}
	if err := m.sync("device to device"); err != nil {
		return 0, err
	}
	if !bytes.Equal(got, in[100:5100]) {
		return 0, fmt.Errorf("device-to-device copy at offsets: wrong data (stream order not kept?)")
	}
	return b, nil
}

// memset sets a middle range of b's first bytes.
func (m *deviceMem) memset(b uintptr) error {
	if err := m.d.Memset(b+10, 0xab, 300); err != nil {
		return fmt.Errorf("memset: %w", err)
	}
	ms := make([]byte, 320)
	if err := m.d.CopyDtoH(ms, b); err != nil {
		return err
	}
	if err := m.sync("memset"); err != nil {
		return err
	}
	for i, v := range ms {
		inside := i >= 10 && i < 310
		if inside && v != 0xab || !inside && v == 0xab {
			return fmt.Errorf("memset: byte %d is %#x", i, v)
		}
	}
	return nil
}

// pinned sends n bytes from a pinned host buffer (the staging path's)
// through b to another, and returns the first buffer.
func (m *deviceMem) pinned(b uintptr, n int) ([]byte, error) {
	h1, err := m.allocHost(n)
	if err != nil {
		return nil, err
	}
	h2, err := m.allocHost(n)
	if err != nil {
		return nil, err
	}
	pattern(h1, 3)
	if err := m.d.CopyHtoD(b, h1); err != nil {
		return nil, err
	}
	if err := m.d.CopyDtoH(h2, b); err != nil {
		return nil, err
	}
	if err := m.sync("pinned"); err != nil {
		return nil, err
	}
	if !bytes.Equal(h1, h2) {
		return nil, fmt.Errorf("round trip through pinned buffers changed the data")
	}
	return h1, nil
}

// checkTensors sends a tensor to the device and back.
func checkTensors(d cuda.Device) error {
	src := tensor.FromFloat32([]float32{1, -2, 3.5, 4e10, 5, 6}, 2, 3)
	dt, err := cuda.ToDevice(d, src)
	if err != nil {
		return fmt.Errorf("ToDevice: %w", err)
	}
	back, err := cuda.ToHost(d, dt)
	if ferr := cuda.FreeTensor(d, dt); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("ToHost: %w", err)
	}
	if !back.Shape().Equal(src.Shape()) || !bytes.Equal(back.Bytes(), src.Bytes()) {
		return fmt.Errorf("tensor round trip: got %v %v, want %v %v", back, back.Float32s(), src, src.Float32s())
	}
	return nil
}

// checkStage runs Device.Stage over n bytes of device memory at p through
// the pinned buffer host (at least n bytes).
func checkStage(d cuda.Device, p uintptr, host []byte) error {
	const n, piece = 10000, 1024 // 10 pieces, the last of 784 bytes
	in := make([]byte, n)
	pattern(in, 11)
	if err := d.CopyHtoD(p, in); err != nil {
		return err
	}
	var seen []int
	off := 0
	err := d.Stage(p, host[:n], piece, func(b []byte) error {
		if !bytes.Equal(b, in[off:off+len(b)]) {
			return fmt.Errorf("piece %d at %d holds the wrong bytes", len(seen), off)
		}
		seen = append(seen, len(b))
		off += len(b)
		for i := range b {
			b[i] ^= 0xff
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(seen) != 10 || seen[0] != piece || seen[9] != n-9*piece {
		return fmt.Errorf("pieces of %v bytes, want 9 of %d and one of %d", seen, piece, n-9*piece)
	}
	out := make([]byte, n)
	if err := d.CopyDtoH(out, p); err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return err
	}
	for i := range out {
		if out[i] != in[i]^0xff {
			return fmt.Errorf("byte %d is %#x after staging, want %#x", i, out[i], in[i]^0xff)
		}
	}
	// A failure in piece 3: reported as is; pieces 0-2 are back, the
	// rest untouched; the device goes on working.
	failed := errors.New("piece 3 failed")
	calls := 0
	err = d.Stage(p, host[:n], piece, func(b []byte) error {
		if calls == 3 {
			return failed
		}
		calls++
		for i := range b {
			b[i] ^= 0xff
		}
		return nil
	})
	if !errors.Is(err, failed) {
		return fmt.Errorf("a failing piece returned %v", err)
	}
	if err := d.CopyDtoH(out, p); err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync after a failed stage: %w", err)
	}
	for i := range out {
		want := in[i] ^ 0xff
		if i < 3*piece {
			want = in[i]
		}
		if out[i] != want {
			return fmt.Errorf("after a failure in piece 3, byte %d is %#x, want %#x", i, out[i], want)
		}
	}
	return nil
}

// checkBatch copies 300 pieces of a patterned device buffer into another,
// packed with a one-byte gap after each, through one CopyDtoDBatch, and
// checks every byte, the gaps included.
func checkBatch(d cuda.Device, alloc func(int) (uintptr, error)) error {
	sizes := []int{1, 3, 4, 12, 16, 17, 100, 4096, 65539, 1<<16 + 16}
	const copies = 300
	var dsts, srcs []uintptr
	var ns, srcOff, dstOff []int
	srcTotal, dstTotal := 0, 0
	for i := range copies {
		n := sizes[i%len(sizes)]
		srcTotal += i % 16 // source offsets of every alignment
		ns, srcOff, dstOff = append(ns, n), append(srcOff, srcTotal), append(dstOff, dstTotal)
		srcTotal += n
		dstTotal += n + 1
	}
	src, err := alloc(srcTotal)
	if err != nil {
		return err
	}
	dst, err := alloc(dstTotal)
	if err != nil {
		return err
	}
	want := make([]byte, srcTotal)
	pattern(want, 7)
	if err := d.CopyHtoD(src, want); err != nil {
		return err
	}
	if err := d.Memset(dst, 0, dstTotal); err != nil {
		return err
	}
	for i := range ns {
		dsts, srcs = append(dsts, dst+uintptr(dstOff[i])), append(srcs, src+uintptr(srcOff[i]))
	}
	if err := d.CopyDtoDBatch(dsts, srcs, ns); err != nil {
		return err
	}
	got := make([]byte, dstTotal)
	if err := d.CopyDtoH(got, dst); err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return err
	}
	for i, n := range ns {
		piece := got[dstOff[i] : dstOff[i]+n]
		if !bytes.Equal(piece, want[srcOff[i]:srcOff[i]+n]) {
			return fmt.Errorf("copy %d of %d bytes (source offset %d, destination offset %d) arrived wrong", i, n, srcOff[i], dstOff[i])
		}
		if gap := got[dstOff[i]+n]; gap != 0 {
			return fmt.Errorf("copy %d of %d bytes wrote past its end (byte %d after it is %d)", i, n, dstOff[i]+n, gap)
		}
	}
	return nil
}
