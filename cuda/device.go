package cuda

import (
	"errors"
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
	// CopyDtoDBatch queues the copies dsts[i] <- srcs[i] of sizes[i]
	// bytes (a fusion buffer's tensors), as few calls as the device
	// allows; their ranges must not overlap. The batch is ordered with the
	// device's other work.
	CopyDtoDBatch(dsts, srcs []uintptr, sizes []int) error
	// Memset queues setting n bytes at dst to v.
	Memset(dst uintptr, v byte, n int) error
	// Stage runs fn on len(host) bytes of device memory at p, through
	// host (page-locked memory from AllocHost), in pieces of piece bytes
	// (the last one shorter; piece <= 0: one piece): each piece is copied
	// to host, fn runs on it on the calling goroutine, in order, and it is
	// copied back. The copies of later pieces overlap fn on earlier ones.
	// When fn or a copy fails, Stage stops queuing, waits for the copies
	// already queued and returns the error; the pieces fn has not seen are
	// not copied back. The results are in place once Sync returns.
	Stage(p uintptr, host []byte, piece int, fn func(b []byte) error) error
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

	mu           sync.Mutex
	closed       bool
	batchRefused error // why cudaMemcpyBatchAsync is no longer used
	kernel       copyKernelState

	// The batched copies' fallback, made at first use: side streams and
	// the events that fork them off the stream and join them back.
	side   []*Stream
	fork   *Event
	joined []*Event

	// Stage's second stream, which copies pieces back to the device, the
	// events that mark each piece's arrival on the host, and the one that
	// joins the upload stream back.
	up     *Stream
	pieces []*Event
	upDone *Event
}

// FanOutStreams is how many streams GPU.CopyDtoDBatch spreads a batch's
// copies over when the runtime has no cudaMemcpyBatchAsync (before CUDA
// 12.8), so that small copies run concurrently instead of one after the
// other. Not measured on a GPU yet: cuda/cmd/gpucheck prints the fusion
// copy spread over 1, 2, 4 and 8 streams beside the batch call and the
// plain copy, for choosing it on the next GPU machine.
const FanOutStreams = 4

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

// CopyDtoDBatch queues the copies with the copy kernel (CopyDtoDKernel)
// where the driver loads it; else as one cudaMemcpyBatchAsync on the
// device's stream when the runtime has it (CUDA 12.8+); otherwise it
// spreads them over FanOutStreams side streams (CopyDtoDSpread). When the
// runtime refuses the batch call itself (cudaErrorNotSupported,
// cudaErrorCallRequiresNewerDriver: a driver older than the runtime; or
// cudaErrorInvalidValue for copies that succeed when spread), the copies
// are spread instead, now and from then on, and BatchRefused says why.
// Copying again is harmless: the copies do not overlap.
func (g *GPU) CopyDtoDBatch(dsts, srcs []uintptr, sizes []int) error {
	if err := g.live(); err != nil {
		return err
	}
	if err := checkBatch(dsts, srcs, sizes); err != nil {
		return err
	}
	if g.CopyKernelRefused() == nil {
		err := g.launchCopies(dsts, srcs, sizes) // checked above
		if err == nil {
			return nil
		}
		// Not loaded, or the launch refused: the copies that ran (whole
		// launches of non-overlapping copies) are harmless to repeat.
		g.refuseCopyKernel(err)
	}
	if !g.rt.HasMemcpyBatch() || g.BatchRefused() != nil {
		return g.spread(dsts, srcs, sizes, FanOutStreams)
	}
	err := g.stream.CopyDtoDBatch(dsts, srcs, sizes)
	var cerr *Error
	if err == nil || !errors.As(err, &cerr) || !batchRefusal(cerr.Code) {
		return err
	}
	if serr := g.spread(dsts, srcs, sizes, FanOutStreams); serr != nil {
		return errors.Join(err, serr) // the copies themselves are wrong
	}
	g.mu.Lock()
	g.batchRefused = err
	g.mu.Unlock()
	return nil
}

// batchRefusal reports whether cudaMemcpyBatchAsync's error code may mean
// that the call, rather than the copies, is refused.
func batchRefusal(code int) bool {
	return code == cudaErrorInvalidValue || code == cudaErrorCallRequiresNewerDriver || code == cudaErrorNotSupported
}

// BatchRefused returns the error with which the runtime refused
// cudaMemcpyBatchAsync, after which CopyDtoDBatch spreads the copies over
// streams; nil while it batches (or never could: Runtime.HasMemcpyBatch).
func (g *GPU) BatchRefused() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.batchRefused
}

// CopyDtoDSpread is CopyDtoDBatch's fallback, also where the runtime has
// cudaMemcpyBatchAsync (gpucheck measures the two against each other): it
// spreads the copies round-robin over k side streams (k >= 1), forked
// from and joined back to the device's stream with events, so that the
// batch stays ordered with the rest of the stream's work while small
// copies run concurrently. A single copy goes on the device's stream.
func (g *GPU) CopyDtoDSpread(dsts, srcs []uintptr, sizes []int, k int) error {
	if err := g.live(); err != nil {
		return err
	}
	if err := checkBatch(dsts, srcs, sizes); err != nil {
		return err
	}
	if k < 1 {
		return fmt.Errorf("cuda: copies spread over %d streams", k)
	}
	return g.spread(dsts, srcs, sizes, k)
}

// spread is CopyDtoDSpread on a checked batch of a live GPU.
func (g *GPU) spread(dsts, srcs []uintptr, sizes []int, k int) error {
	if len(dsts) < 2 {
		for i := range dsts {
			if err := g.stream.CopyDtoD(dsts[i], srcs[i], sizes[i]); err != nil {
				return err
			}
		}
		return nil
	}
	return g.fanOut(dsts, srcs, sizes, k)
}

// fanOut spreads the copies over k side streams.
func (g *GPU) fanOut(dsts, srcs []uintptr, sizes []int, k int) (err error) {
	k = min(k, len(dsts))
	if err := g.sideStreams(k); err != nil {
		return err
	}
	if err := g.fork.Record(g.stream); err != nil {
		return err
	}
	forked := 0
	defer func() {
		// Join every forked stream back, on failure too: the device's
		// stream must not run ahead of copies already queued.
		for j := 0; j < forked; j++ {
			jerr := g.joined[j].Record(g.side[j])
			if jerr == nil {
				jerr = g.stream.WaitEvent(g.joined[j])
			}
			if err == nil {
				err = jerr
			}
		}
	}()
	for ; forked < k; forked++ {
		if err := g.side[forked].WaitEvent(g.fork); err != nil {
			return err
		}
	}
	for i := range dsts {
		if err := g.side[i%k].CopyDtoD(dsts[i], srcs[i], sizes[i]); err != nil {
			return fmt.Errorf("batched copy %d: %w", i, err)
		}
	}
	return nil
}

// sideStreams makes the fallback's fork event and at least k side
// streams with their join events.
func (g *GPU) sideStreams(k int) error {
	if g.fork == nil {
		f, err := g.rt.NewEvent(g.dev, false)
		if err != nil {
			return err
		}
		g.fork = f
	}
	for len(g.side) < k {
		s, err := g.rt.NewStream(g.dev)
		if err != nil {
			return err
		}
		e, err := g.rt.NewEvent(g.dev, false)
		if err != nil {
			return errors.Join(err, s.Destroy())
		}
		g.side, g.joined = append(g.side, s), append(g.joined, e)
	}
	return nil
}

// Stage copies the pieces to host on the device's stream, each followed
// by an event, all queued at once; fn runs on each piece as soon as its
// event completes, and the piece goes back on a second stream, which is
// joined to the device's stream at the end. So the copies to the host run
// ahead of fn, and the copies back overlap fn on the next pieces.
func (g *GPU) Stage(p uintptr, host []byte, piece int, fn func(b []byte) error) (err error) {
	if err := g.live(); err != nil {
		return err
	}
	n := len(host)
	if n == 0 {
		return nil
	}
	if piece <= 0 || piece > n {
		piece = n
	}
	k := (n + piece - 1) / piece
	if err := g.stageStreams(k); err != nil {
		return err
	}
	queued := 0
	defer func() {
		// On failure, let the copies already queued, both ways, finish
		// before the caller may reuse host; and always join the upload
		// stream, so that Sync covers the copies back.
		if err != nil {
			if serr := g.stream.Synchronize(); serr != nil {
				err = errors.Join(err, serr)
			}
			if serr := g.up.Synchronize(); serr != nil {
				err = errors.Join(err, serr)
			}
		}
		jerr := g.upDone.Record(g.up)
		if jerr == nil {
			jerr = g.stream.WaitEvent(g.upDone)
		}
		if err == nil {
			err = jerr
		}
	}()
	for ; queued < k; queued++ {
		lo, hi := queued*piece, min((queued+1)*piece, n)
		if err := g.stream.CopyDtoH(host[lo:hi], p+uintptr(lo)); err != nil {
			return fmt.Errorf("staging piece %d of %d: %w", queued, k, err)
		}
		if err := g.pieces[queued].Record(g.stream); err != nil {
			return fmt.Errorf("staging piece %d of %d: %w", queued, k, err)
		}
	}
	for i := 0; i < k; i++ {
		lo, hi := i*piece, min((i+1)*piece, n)
		if err := g.pieces[i].Synchronize(); err != nil {
			return fmt.Errorf("staging piece %d of %d: %w", i, k, err)
		}
		if err := fn(host[lo:hi]); err != nil {
			return err
		}
		if err := g.up.CopyHtoD(p+uintptr(lo), host[lo:hi]); err != nil {
			return fmt.Errorf("staging piece %d of %d back: %w", i, k, err)
		}
	}
	return nil
}

// stageStreams makes Stage's stream and at least k piece events.
func (g *GPU) stageStreams(k int) error {
	var err error
	if g.up == nil {
		if g.upDone, err = g.rt.NewEvent(g.dev, false); err != nil {
			return err
		}
		if g.up, err = g.rt.NewStream(g.dev); err != nil {
			return err
		}
	}
	for len(g.pieces) < k {
		e, err := g.rt.NewEvent(g.dev, false)
		if err != nil {
			return err
		}
		g.pieces = append(g.pieces, e)
	}
	return nil
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
	g.unloadCopyKernel()
	derr := g.stream.Destroy()
	for i, s := range g.side {
		derr = errors.Join(derr, s.Destroy(), g.joined[i].Destroy())
	}
	if g.fork != nil {
		derr = errors.Join(derr, g.fork.Destroy())
	}
	if g.up != nil {
		derr = errors.Join(derr, g.up.Synchronize(), g.up.Destroy(), g.upDone.Destroy())
	}
	for _, e := range g.pieces {
		derr = errors.Join(derr, e.Destroy())
	}
	g.side, g.joined, g.fork, g.up, g.upDone, g.pieces = nil, nil, nil, nil, nil, nil
	if serr != nil {
		return serr
	}
	return derr
}

// copyKernelState is a GPU's copy kernels: loaded at first use in the
// device's primary context (which the runtime makes current with
// cudaSetDevice) and checked there, the one in use, or the reason none is.
type copyKernelState struct {
	tried  bool
	module uintptr
	fns    [copyKernelKinds]uintptr // the loaded kernels
	failed [copyKernelKinds]error   // why a kernel is not usable
	use    CopyKernelKind           // the kernel in use, unless err
	err    error                    // why no kernel is used
}

// CopyKernelRefused returns why CopyDtoDBatch does not use the copy
// kernel (the driver library or the kernel could not be loaded, or a
// launch failed), or nil while it does or has not tried yet.
func (g *GPU) CopyKernelRefused() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.kernel.err
}

// refuseCopyKernel stops CopyDtoDBatch from using the kernel after err.
func (g *GPU) refuseCopyKernel(err error) {
	g.mu.Lock()
	g.kernel.err = err
	g.mu.Unlock()
}

// checkBatch validates a batch of device-to-device copies: as many
// destinations and sources as sizes, no negative size, no address 0 in a
// copy that moves bytes.
func checkBatch(dsts, srcs []uintptr, sizes []int) error {
	if len(dsts) != len(srcs) || len(dsts) != len(sizes) {
		return fmt.Errorf("cuda: batch of %d destinations, %d sources and %d sizes", len(dsts), len(srcs), len(sizes))
	}
	for i, n := range sizes {
		switch {
		case n < 0:
			return fmt.Errorf("cuda: batched copy %d of %d bytes", i, n)
		case n > 0 && (dsts[i] == 0 || srcs[i] == 0):
			return fmt.Errorf("cuda: batched copy %d of %d bytes with address 0 (%#x <- %#x)", i, n, dsts[i], srcs[i])
		}
	}
	return nil
}

// CopyDtoDMemcpyBatch queues the copies as one cudaMemcpyBatchAsync on
// the device's stream, whatever CopyDtoDBatch would choose (gpucheck
// measures the ways against each other); ErrNoMemcpyBatch before CUDA 12.8.
func (g *GPU) CopyDtoDMemcpyBatch(dsts, srcs []uintptr, sizes []int) error {
	if err := g.live(); err != nil {
		return err
	}
	return g.stream.CopyDtoDBatch(dsts, srcs, sizes)
}
