package cuda

import (
	"fmt"
	"sync"
)

// Device is one GPU as the runtime's staging and fusion paths see it.
// Device addresses are uintptr, as tensor.Tensor.DevicePtr returns them.
//
// Copies and Memset are queued in order on the device's stream and may
// complete after they return: the results are guaranteed, and the host
// buffers they read or write may be touched again, only once Sync has
// returned. Free waits for queued work, as cudaFree does. A Device is safe
// for use by one goroutine at a time.
type Device interface {
	// Ordinal returns the CUDA device index.
	Ordinal() int
	// Alloc returns n bytes of device memory (0 for n == 0).
	Alloc(n int) (uintptr, error)
	// Free releases memory from Alloc (0 is a no-op).
	Free(p uintptr) error
	// AllocHost returns n bytes of page-locked host memory, for staging.
	AllocHost(n int) ([]byte, error)
	// FreeHost releases a buffer from AllocHost.
	FreeHost(b []byte) error
	// CopyHtoD queues a copy of src to dst.
	CopyHtoD(dst uintptr, src []byte) error
	// CopyDtoH queues a copy of len(dst) bytes at src into dst.
	CopyDtoH(dst []byte, src uintptr) error
	// CopyDtoD queues a copy of n bytes from src to dst.
	CopyDtoD(dst, src uintptr, n int) error
	// Memset queues setting n bytes at dst to v.
	Memset(dst uintptr, v byte, n int) error
	// Sync waits until everything queued has completed.
	Sync() error
	// Close waits for queued work and releases the device's own resources
	// (not the memory the caller allocated).
	Close() error
}

// GPU is a Device backed by the CUDA runtime: one non-blocking stream on
// one device carries its copies, so that NCCL collectives queued on the
// same stream (GPU.Stream) are ordered with them.
type GPU struct {
	rt     *Runtime
	dev    int
	stream *Stream

	mu     sync.Mutex
	closed bool
}

var _ Device = (*GPU)(nil)

// OpenDevice checks that dev exists and returns a GPU with a new stream on
// it.
func (r *Runtime) OpenDevice(dev int) (*GPU, error) {
	n, err := r.DeviceCount()
	if err != nil {
		return nil, err
	}
	if dev < 0 || dev >= n {
		return nil, fmt.Errorf("cuda: device %d does not exist (%d visible)", dev, n)
	}
	s, err := r.NewStream(dev)
	if err != nil {
		return nil, err
	}
	return &GPU{rt: r, dev: dev, stream: s}, nil
}

// Ordinal returns the device index.
func (g *GPU) Ordinal() int { return g.dev }

// Runtime returns the CUDA runtime the device belongs to.
func (g *GPU) Runtime() *Runtime { return g.rt }

// Stream returns the stream the device's copies are queued on.
func (g *GPU) Stream() *Stream { return g.stream }

func (g *GPU) live() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	return nil
}

// Alloc allocates device memory.
func (g *GPU) Alloc(n int) (uintptr, error) {
	if err := g.live(); err != nil {
		return 0, err
	}
	return g.rt.Malloc(g.dev, n)
}

// Free releases device memory.
func (g *GPU) Free(p uintptr) error { return g.rt.Free(g.dev, p) }

// AllocHost allocates page-locked host memory.
func (g *GPU) AllocHost(n int) ([]byte, error) {
	if err := g.live(); err != nil {
		return nil, err
	}
	return g.rt.MallocHost(g.dev, n)
}

// FreeHost releases page-locked host memory.
func (g *GPU) FreeHost(b []byte) error { return g.rt.FreeHost(b) }

// CopyHtoD queues a host-to-device copy on the device's stream.
func (g *GPU) CopyHtoD(dst uintptr, src []byte) error {
	if err := g.live(); err != nil {
		return err
	}
	return g.stream.CopyHtoD(dst, src)
}

// CopyDtoH queues a device-to-host copy on the device's stream.
func (g *GPU) CopyDtoH(dst []byte, src uintptr) error {
	if err := g.live(); err != nil {
		return err
	}
	return g.stream.CopyDtoH(dst, src)
}

// CopyDtoD queues a device-to-device copy on the device's stream.
func (g *GPU) CopyDtoD(dst, src uintptr, n int) error {
	if err := g.live(); err != nil {
		return err
	}
	return g.stream.CopyDtoD(dst, src, n)
}

// Memset queues a memset on the device's stream.
func (g *GPU) Memset(dst uintptr, v byte, n int) error {
	if err := g.live(); err != nil {
		return err
	}
	return g.stream.Memset(dst, v, n)
}

// Sync waits for the device's stream.
func (g *GPU) Sync() error {
	if err := g.live(); err != nil {
		return err
	}
	return g.stream.Synchronize()
}

// Close synchronises and destroys the device's stream. A second Close is a
// no-op.
func (g *GPU) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	serr := g.stream.Synchronize()
	derr := g.stream.Destroy()
	if serr != nil {
		return serr
	}
	return derr
}
