package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// FakeConfig configures a Fake device.
type FakeConfig struct {
	// Ordinal is the device index the fake reports.
	Ordinal int
	// Eager makes queued operations happen at once. By default they are
	// held until Sync (or Free, or Close), as a real stream may, so that a
	// caller that reads results before Sync sees stale data in tests.
	Eager bool
	// MemoryLimit, when positive, makes Alloc fail with the error a real
	// device gives (cudaErrorMemoryAllocation) beyond that many live bytes.
	MemoryLimit int
}

// FakeStats counts what a Fake device has been asked to do.
type FakeStats struct {
	Allocs, Frees         int   // device allocations and frees
	LiveAllocs, LiveBytes int   // device memory still allocated
	PeakBytes             int   // most device memory allocated at once
	HostAllocs            int   // AllocHost calls
	LiveHostAllocs        int   // host buffers not yet freed
	HtoD, DtoH, DtoD      int   // copies queued, by direction
	HtoDBytes, DtoHBytes  int64 // bytes copied, by direction
	DtoDBytes             int64
	Batches               int // CopyDtoDBatch calls (their copies count in DtoD)
	Stages, StagePieces   int // Stage calls and the pieces they staged (their copies count in DtoH and HtoD)
	Memsets               int
	Syncs                 int
}

// Fake is a Device whose "device memory" is host memory, for testing the
// staging and fusion paths on machines without a GPU. Its addresses are
// real addresses of Go-allocated buffers, aligned to 256 bytes as
// cudaMalloc's are, which the fake keeps alive until Free; every address
// range an operation names is checked to lie inside one live allocation,
// so out-of-bounds and use-after-free bugs are errors rather than
// corruption.
type Fake struct {
	cfg  FakeConfig
	dev  arena
	host arena

	mu      sync.Mutex
	pending []func()
	stats   FakeStats
	closed  bool
}

var _ Device = (*Fake)(nil)

// NewFake returns a fake device.
func NewFake(cfg FakeConfig) *Fake {
	return &Fake{
		cfg:  cfg,
		dev:  arena{what: fmt.Sprintf("cuda: fake device %d memory", cfg.Ordinal), align: 256, limit: cfg.MemoryLimit},
		host: arena{what: fmt.Sprintf("cuda: fake device %d pinned host memory", cfg.Ordinal), align: 64},
	}
}

// Ordinal returns the configured device index.
func (f *Fake) Ordinal() int { return f.cfg.Ordinal }

func (f *Fake) live() error {
	if f.closed {
		return ErrClosed
	}
	return nil
}

// Alloc returns the address of n zeroed bytes of fake device memory.
func (f *Fake) Alloc(n int) (uintptr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("cuda: Malloc of %d bytes", n)
	}
	if n == 0 {
		return 0, nil
	}
	p, _, err := f.dev.alloc(n)
	if err != nil {
		return 0, &Error{Op: fmt.Sprintf("cudaMalloc(%d bytes) on fake device %d: %v", n, f.cfg.Ordinal, err),
			Code: cudaErrorMemoryAllocation, Name: "cudaErrorMemoryAllocation", Msg: "out of memory"}
	}
	f.stats.Allocs++
	return p, nil
}

// Free runs queued operations (cudaFree waits for the device) and releases
// p.
func (f *Fake) Free(p uintptr) error {
	if p == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flush()
	if err := f.dev.free(p); err != nil {
		return err
	}
	f.stats.Frees++
	return nil
}

// AllocHost returns n bytes of (fake pinned) host memory.
func (f *Fake) AllocHost(n int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, fmt.Errorf("cuda: MallocHost of %d bytes", n)
	}
	_, b, err := f.host.alloc(n)
	if err != nil {
		return nil, err
	}
	f.stats.HostAllocs++
	return b, nil
}

// FreeHost releases a buffer from AllocHost.
func (f *Fake) FreeHost(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("cuda: FreeHost of an empty slice")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flush()
	return f.host.free(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// enqueue runs op now (Eager) or at the next Sync.
func (f *Fake) enqueue(op func()) {
	if f.cfg.Eager {
		op()
		return
	}
	f.pending = append(f.pending, op)
}

func (f *Fake) flush() {
	for _, op := range f.pending {
		op()
	}
	f.pending = nil
}

// CopyHtoD queues a copy of src into fake device memory at dst.
func (f *Fake) CopyHtoD(dst uintptr, src []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	d, err := f.dev.slice(dst, len(src))
	if err != nil {
		return fmt.Errorf("cuda: copy host to device: %w", err)
	}
	f.stats.HtoD++
	f.stats.HtoDBytes += int64(len(src))
	f.enqueue(func() { copy(d, src) })
	return nil
}

// CopyDtoH queues a copy of fake device memory at src into dst.
func (f *Fake) CopyDtoH(dst []byte, src uintptr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	s, err := f.dev.slice(src, len(dst))
	if err != nil {
		return fmt.Errorf("cuda: copy device to host: %w", err)
	}
	f.stats.DtoH++
	f.stats.DtoHBytes += int64(len(dst))
	f.enqueue(func() { copy(dst, s) })
	return nil
}

// CopyDtoD queues a copy of n bytes between fake device addresses
// (overlapping ranges behave like memmove).
func (f *Fake) CopyDtoD(dst, src uintptr, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("cuda: device copy of %d bytes", n)
	}
	if n == 0 {
		return nil
	}
	d, err := f.dev.slice(dst, n)
	if err != nil {
		return fmt.Errorf("cuda: copy device to device (destination): %w", err)
	}
	s, err := f.dev.slice(src, n)
	if err != nil {
		return fmt.Errorf("cuda: copy device to device (source): %w", err)
	}
	f.stats.DtoD++
	f.stats.DtoDBytes += int64(n)
	f.enqueue(func() { copy(d, s) })
	return nil
}

// CopyDtoDBatch queues the copies as CopyDtoD does, one by one, and
// counts the batch.
func (f *Fake) CopyDtoDBatch(dsts, srcs []uintptr, sizes []int) error {
	if len(dsts) != len(srcs) || len(dsts) != len(sizes) {
		return fmt.Errorf("cuda: batch of %d destinations, %d sources and %d sizes", len(dsts), len(srcs), len(sizes))
	}
	for i := range dsts {
		if err := f.CopyDtoD(dsts[i], srcs[i], sizes[i]); err != nil {
			return fmt.Errorf("batched copy %d: %w", i, err)
		}
	}
	f.mu.Lock()
	f.stats.Batches++
	f.mu.Unlock()
	return nil
}

// Stage runs the pieces one after the other: copy to host, perform the
// queue, fn, copy back (queued).
func (f *Fake) Stage(p uintptr, host []byte, piece int, fn func(b []byte) error) error {
	n := len(host)
	if n == 0 {
		return nil
	}
	if piece <= 0 || piece > n {
		piece = n
	}
	f.mu.Lock()
	f.stats.Stages++
	f.mu.Unlock()
	for lo := 0; lo < n; lo += piece {
		hi := min(lo+piece, n)
		if err := f.CopyDtoH(host[lo:hi], p+uintptr(lo)); err != nil {
			return err
		}
		f.mu.Lock()
		f.flush()
		f.stats.StagePieces++
		f.mu.Unlock()
		if err := fn(host[lo:hi]); err != nil {
			return err
		}
		if err := f.CopyHtoD(p+uintptr(lo), host[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// Memset queues setting n bytes at dst to v.
func (f *Fake) Memset(dst uintptr, v byte, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("cuda: memset of %d bytes", n)
	}
	if n == 0 {
		return nil
	}
	d, err := f.dev.slice(dst, n)
	if err != nil {
		return fmt.Errorf("cuda: memset: %w", err)
	}
	f.stats.Memsets++
	f.enqueue(func() {
		for i := range d {
			d[i] = v
		}
	})
	return nil
}

// Sync performs every queued operation, in order.
func (f *Fake) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return err
	}
	f.flush()
	f.stats.Syncs++
	return nil
}

// Pending returns the number of operations queued and not yet performed.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// Bytes returns the n bytes of fake device memory at p, for tests to
// inspect or fill directly (queued operations are not performed first).
func (f *Fake) Bytes(p uintptr, n int) ([]byte, error) {
	return f.dev.slice(p, n)
}

// Stats returns the counters.
func (f *Fake) Stats() FakeStats {
	f.mu.Lock()
	s := f.stats
	f.mu.Unlock()
	s.LiveAllocs, s.LiveBytes, s.PeakBytes = f.dev.stats()
	s.LiveHostAllocs, _, _ = f.host.stats()
	return s
}

// Close performs queued operations and closes the device. It reports an
// error if device or host allocations are still live (a leak), so that
// tests catch them; the memory is released either way.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.flush()
	f.closed = true
	n, b, _ := f.dev.stats()
	h, hb, _ := f.host.stats()
	f.dev.reset()
	f.host.reset()
	if n > 0 || h > 0 {
		return fmt.Errorf("cuda: fake device %d closed with %d device allocations (%d bytes) and %d host buffers (%d bytes) still live",
			f.cfg.Ordinal, n, b, h, hb)
	}
	return nil
}
