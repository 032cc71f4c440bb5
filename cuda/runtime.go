package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Runtime is a loaded CUDA runtime library. Its methods are safe for
// concurrent use; each call that concerns a device names it, and the shim
// makes that device current on the calling thread within the same C call.
type Runtime struct {
	api     cudartAPI
	path    string
	version Version

	mu     sync.Mutex
	pinned map[uintptr]int // base address -> size of each MallocHost buffer
}

// OpenRuntime loads the CUDA runtime as cfg says (uncached; Load is the
// cached, environment-configured entry point). It fails with ErrNoDlopen
// on a platform other than linux/amd64 and linux/arm64, and with a *LoadError (listing every path
// tried) when no library with the runtime's entry points is found.
func OpenRuntime(cfg LoadConfig) (*Runtime, error) {
	if !dlopenSupported {
		return nil, ErrNoDlopen
	}
	l := systemLoader()
	spec := libSpec{what: "CUDA runtime", env: EnvCudartPath, names: cudartNames, symbols: l.cudartSymbols(),
		optional: map[string]bool{cudartOptionalSymbolMemcpyBatch: true}}
	o, err := openLib(l, spec, cfg.CudartPath, cfg.CudartDirs)
	if err != nil {
		return nil, err
	}
	return newRuntime(newCudartAPI(o.syms), o.path)
}

func newRuntime(api cudartAPI, path string) (*Runtime, error) {
	v, code := api.runtimeVersion()
	if err := cudaErr(api, code, "cudaRuntimeGetVersion"); err != nil {
		return nil, err
	}
	return &Runtime{api: api, path: path, version: CUDAVersion(v), pinned: make(map[uintptr]int)}, nil
}

// HasMemcpyBatch reports whether the runtime batches copies
// (cudaMemcpyBatchAsync, CUDA 12.8 and later): Stream.CopyDtoDBatch is
// one call then, and GPU.CopyDtoDBatch spreads the copies over streams
// otherwise.
func (r *Runtime) HasMemcpyBatch() bool { return r.api.hasMemcpyBatch() }

// Path returns the file the runtime was loaded from.
func (r *Runtime) Path() string { return r.path }

// Version returns the runtime's version (cudaRuntimeGetVersion).
func (r *Runtime) Version() Version { return r.version }

// DriverVersion returns the latest CUDA version the installed driver
// supports (cudaDriverGetVersion); 0.0 means no driver is installed.
func (r *Runtime) DriverVersion() (Version, error) {
	v, code := r.api.driverVersion()
	if err := cudaErr(r.api, code, "cudaDriverGetVersion"); err != nil {
		return Version{}, err
	}
	return CUDAVersion(v), nil
}

// DeviceCount returns the number of visible devices. With no driver or no
// device it returns an *Error that matches ErrUnavailable.
func (r *Runtime) DeviceCount() (int, error) {
	n, code := r.api.deviceCount()
	if err := cudaErr(r.api, code, "cudaGetDeviceCount"); err != nil {
		return 0, err
	}
	return n, nil
}

// Describe summarises the runtime, the driver and the devices in one line.
func (r *Runtime) Describe() string {
	s := fmt.Sprintf("CUDA runtime %v (%s)", r.version, r.path)
	if dv, err := r.DriverVersion(); err == nil {
		s += fmt.Sprintf(", driver supports CUDA %v", dv)
	}
	n, err := r.DeviceCount()
	if err != nil {
		return s + "; no usable device: " + err.Error()
	}
	s += fmt.Sprintf(", %d device(s)", n)
	var infos []string
	for d := 0; d < n; d++ {
		if info, err := r.DeviceInfo(d); err == nil {
			infos = append(infos, info.String())
		}
	}
	if len(infos) > 0 {
		s += ": " + strings.Join(infos, "; ")
	}
	return s
}

// DeviceInfo describes one device.
type DeviceInfo struct {
	Ordinal          int
	PCIBusID         string
	ComputeMajor     int
	ComputeMinor     int
	Multiprocessors  int
	TotalMemoryBytes uint64
}

// String implements fmt.Stringer.
func (d DeviceInfo) String() string {
	return fmt.Sprintf("GPU %d (%s) sm_%d%d, %d SMs, %.1f GiB", d.Ordinal, d.PCIBusID, d.ComputeMajor, d.ComputeMinor,
		d.Multiprocessors, float64(d.TotalMemoryBytes)/(1<<30))
}

// DeviceInfo returns the compute capability, multiprocessor count, PCI bus
// id and memory size of device dev.
func (r *Runtime) DeviceInfo(dev int) (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: dev}
	for _, a := range []struct {
		attr int
		dst  *int
	}{
		{cudaDevAttrComputeCapabilityMajor, &info.ComputeMajor},
		{cudaDevAttrComputeCapabilityMinor, &info.ComputeMinor},
		{cudaDevAttrMultiProcessorCount, &info.Multiprocessors},
	} {
		v, code := r.api.attribute(dev, a.attr)
		if err := cudaErr(r.api, code, "cudaDeviceGetAttribute(%d) on device %d", a.attr, dev); err != nil {
			return info, err
		}
		*a.dst = v
	}
	id, code := r.api.pciBusID(dev)
	if err := cudaErr(r.api, code, "cudaDeviceGetPCIBusId on device %d", dev); err != nil {
		return info, err
	}
	info.PCIBusID = id
	_, total, err := r.MemInfo(dev)
	if err != nil {
		return info, err
	}
	info.TotalMemoryBytes = total
	return info, nil
}

// MemInfo returns the free and total memory of device dev in bytes.
func (r *Runtime) MemInfo(dev int) (free, total uint64, err error) {
	free, total, code := r.api.memInfo(dev)
	return free, total, cudaErr(r.api, code, "cudaMemGetInfo on device %d", dev)
}

// Malloc allocates n bytes on device dev (cudaMalloc). n == 0 returns 0,
// which Free accepts.
func (r *Runtime) Malloc(dev, n int) (uintptr, error) {
	if n < 0 {
		return 0, fmt.Errorf("cuda: Malloc of %d bytes", n)
	}
	if n == 0 {
		return 0, nil
	}
	p, code := r.api.malloc(dev, n)
	if err := cudaErr(r.api, code, "cudaMalloc(%d bytes) on device %d", n, dev); err != nil {
		return 0, err
	}
	return p, nil
}

// Free releases memory from Malloc (cudaFree; 0 is a no-op). cudaFree
// waits for work on the device that may still use the memory.
func (r *Runtime) Free(dev int, p uintptr) error {
	if p == 0 {
		return nil
	}
	return cudaErr(r.api, r.api.free(dev, p), "cudaFree(%#x) on device %d", p, dev)
}

// MallocHost allocates n bytes of page-locked host memory (cudaMallocHost),
// which copies to and from device dev can overlap with computation. The
// slice stays valid until FreeHost; it is C memory, never moved or
// collected by Go.
func (r *Runtime) MallocHost(dev, n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: MallocHost of %d bytes", n)
	}
	p, code := r.api.mallocHost(dev, n)
	if err := cudaErr(r.api, code, "cudaMallocHost(%d bytes) on device %d", n, dev); err != nil {
		return nil, err
	}
	b := unsafe.Slice((*byte)(p), n)
	r.mu.Lock()
	r.pinned[uintptr(p)] = n
	r.mu.Unlock()
	return b, nil
}

// FreeHost releases a buffer from MallocHost. Passing anything else is an
// error, not a crash.
func (r *Runtime) FreeHost(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("cuda: FreeHost of an empty slice")
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	r.mu.Lock()
	_, ok := r.pinned[uintptr(p)]
	if ok {
		delete(r.pinned, uintptr(p))
	}
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("cuda: FreeHost of %#x, which is not the start of a MallocHost buffer", uintptr(p))
	}
	return cudaErr(r.api, r.api.freeHost(p), "cudaFreeHost(%#x)", uintptr(p))
}

// Memset sets n bytes at dst to v and returns when done.
func (r *Runtime) Memset(dev int, dst uintptr, v byte, n int) error {
	return r.memset(dev, dst, v, n, 0, false)
}

// Synchronize waits for all work on device dev (cudaDeviceSynchronize).
func (r *Runtime) Synchronize(dev int) error {
	return cudaErr(r.api, r.api.deviceSync(dev), "cudaDeviceSynchronize on device %d", dev)
}

func (r *Runtime) copyHtoD(dev int, dst uintptr, src []byte, stream uintptr, async bool) error {
	if len(src) == 0 {
		return nil
	}
	if dst == 0 {
		return fmt.Errorf("cuda: copy of %d bytes to device address 0", len(src))
	}
	code := r.api.memcpyHtoD(dev, dst, unsafe.Pointer(&src[0]), len(src), stream, async)
	return cudaErr(r.api, code, "%s host to device (%d bytes to %#x) on device %d", memcpyName(async), len(src), dst, dev)
}

func (r *Runtime) copyDtoH(dev int, dst []byte, src uintptr, stream uintptr, async bool) error {
	if len(dst) == 0 {
		return nil
	}
	if src == 0 {
		return fmt.Errorf("cuda: copy of %d bytes from device address 0", len(dst))
	}
	code := r.api.memcpyDtoH(dev, unsafe.Pointer(&dst[0]), src, len(dst), stream, async)
	return cudaErr(r.api, code, "%s device to host (%d bytes from %#x) on device %d", memcpyName(async), len(dst), src, dev)
}

func (r *Runtime) copyDtoD(dev int, dst, src uintptr, n int, stream uintptr, async bool) error {
	if n < 0 {
		return fmt.Errorf("cuda: device copy of %d bytes", n)
	}
	if n == 0 {
		return nil
	}
	if dst == 0 || src == 0 {
		return fmt.Errorf("cuda: device copy of %d bytes with address 0 (%#x <- %#x)", n, dst, src)
	}
	code := r.api.memcpyDtoD(dev, dst, src, n, stream, async)
	return cudaErr(r.api, code, "%s device to device (%d bytes, %#x <- %#x) on device %d", memcpyName(async), n, dst, src, dev)
}

func (r *Runtime) memset(dev int, dst uintptr, v byte, n int, stream uintptr, async bool) error {
	if n < 0 {
		return fmt.Errorf("cuda: memset of %d bytes", n)
	}
	if n == 0 {
		return nil
	}
	if dst == 0 {
		return fmt.Errorf("cuda: memset of %d bytes at address 0", n)
	}
	name := "cudaMemset"
	if async {
		name = "cudaMemsetAsync"
	}
	return cudaErr(r.api, r.api.memset(dev, dst, v, n, stream, async), "%s(%#x, %d, %d bytes) on device %d", name, dst, v, n, dev)
}

func memcpyName(async bool) string {
	if async {
		return "cudaMemcpyAsync"
	}
	return "cudaMemcpy"
}

// Stream is a CUDA stream: work queued on it runs in order, asynchronously
// to the host. A nil *Stream stands for the device's legacy default stream
// wherever a stream is taken.
type Stream struct {
	rt     *Runtime
	dev    int
	handle uintptr
}

// NewStream creates a non-blocking stream on device dev
// (cudaStreamCreateWithFlags with cudaStreamNonBlocking, so that it does not
// serialise with the legacy default stream).
func (r *Runtime) NewStream(dev int) (*Stream, error) {
	h, code := r.api.streamCreate(dev, cudaStreamNonBlocking)
	if err := cudaErr(r.api, code, "cudaStreamCreateWithFlags on device %d", dev); err != nil {
		return nil, err
	}
	return &Stream{rt: r, dev: dev, handle: h}, nil
}

// Handle returns the cudaStream_t, for passing to other libraries.
func (s *Stream) Handle() uintptr {
	if s == nil {
		return 0
	}
	return s.handle
}

// Device returns the device the stream belongs to.
func (s *Stream) Device() int { return s.dev }

// CopyHtoD queues a copy of src to device memory at dst. The host memory
// must stay untouched until the stream has been synchronised; from
// page-locked memory (MallocHost) the copy is truly asynchronous, from
// ordinary Go memory CUDA stages it before returning.
func (s *Stream) CopyHtoD(dst uintptr, src []byte) error {
	return s.rt.copyHtoD(s.dev, dst, src, s.handle, true)
}

// CopyDtoH queues a copy of device memory at src into dst; dst holds the
// data once the stream has been synchronised.
func (s *Stream) CopyDtoH(dst []byte, src uintptr) error {
	return s.rt.copyDtoH(s.dev, dst, src, s.handle, true)
}

// CopyDtoD queues a copy of n bytes between device addresses.
func (s *Stream) CopyDtoD(dst, src uintptr, n int) error {
	return s.rt.copyDtoD(s.dev, dst, src, n, s.handle, true)
}

// ErrNoMemcpyBatch is returned by Stream.CopyDtoDBatch when the CUDA
// runtime is older than 12.8.
var ErrNoMemcpyBatch = errors.New("cuda: cudaMemcpyBatchAsync needs CUDA 12.8 or later")

// CopyDtoDBatch queues the device-to-device copies dsts[i] <- srcs[i] of
// sizes[i] bytes as one cudaMemcpyBatchAsync: the batch is ordered with
// the stream's other work, the copies within it are not (their ranges
// must not overlap). Empty copies are left out.
func (s *Stream) CopyDtoDBatch(dsts, srcs []uintptr, sizes []int) error {
	if len(dsts) != len(srcs) || len(dsts) != len(sizes) {
		return fmt.Errorf("cuda: batch of %d destinations, %d sources and %d sizes", len(dsts), len(srcs), len(sizes))
	}
	if !s.rt.api.hasMemcpyBatch() {
		return ErrNoMemcpyBatch
	}
	d := make([]uintptr, 0, len(dsts))
	sr := make([]uintptr, 0, len(dsts))
	n := make([]uintptr, 0, len(dsts))
	idx := make([]int, 0, len(dsts))
	for i, sz := range sizes {
		switch {
		case sz < 0:
			return fmt.Errorf("cuda: batched copy %d of %d bytes", i, sz)
		case sz == 0:
			continue
		case dsts[i] == 0 || srcs[i] == 0:
			return fmt.Errorf("cuda: batched copy %d of %d bytes with address 0 (%#x <- %#x)", i, sz, dsts[i], srcs[i])
		}
		d, sr, n, idx = append(d, dsts[i]), append(sr, srcs[i]), append(n, uintptr(sz)), append(idx, i)
	}
	if len(d) == 0 {
		return nil
	}
	fail, code := s.rt.api.memcpyBatch(s.dev, d, sr, n, s.handle)
	which := ""
	if fail < uintptr(len(idx)) {
		which = fmt.Sprintf(", failed at copy %d (%d bytes, %#x <- %#x)", idx[fail], sizes[idx[fail]], dsts[idx[fail]], srcs[idx[fail]])
	}
	return cudaErr(s.rt.api, code, "cudaMemcpyBatchAsync (%d copies) on device %d%s", len(d), s.dev, which)
}

// WaitEvent makes work queued on s after this call wait until the work
// before e's recorded point has finished (cudaStreamWaitEvent).
func (s *Stream) WaitEvent(e *Event) error {
	return cudaErr(s.rt.api, s.rt.api.streamWaitEvent(s.dev, s.handle, e.handle), "cudaStreamWaitEvent on device %d", s.dev)
}

// Memset queues setting n bytes at dst to v.
func (s *Stream) Memset(dst uintptr, v byte, n int) error {
	return s.rt.memset(s.dev, dst, v, n, s.handle, true)
}

// Synchronize waits until all work queued on the stream has finished.
func (s *Stream) Synchronize() error {
	return cudaErr(s.rt.api, s.rt.api.streamSync(s.dev, s.handle), "cudaStreamSynchronize on device %d", s.dev)
}

// Destroy releases the stream (work already queued still completes).
func (s *Stream) Destroy() error {
	return cudaErr(s.rt.api, s.rt.api.streamDestroy(s.dev, s.handle), "cudaStreamDestroy on device %d", s.dev)
}

// Event marks a point in a stream, to wait for or to time.
type Event struct {
	rt     *Runtime
	dev    int
	handle uintptr
}

// NewEvent creates an event on device dev; timing events can measure
// elapsed time, the others are cheaper.
func (r *Runtime) NewEvent(dev int, timing bool) (*Event, error) {
	var flags uint
	if !timing {
		flags = cudaEventDisableTiming
	}
	h, code := r.api.eventCreate(dev, flags)
	if err := cudaErr(r.api, code, "cudaEventCreateWithFlags on device %d", dev); err != nil {
		return nil, err
	}
	return &Event{rt: r, dev: dev, handle: h}, nil
}

// Record marks the current end of stream s (nil: the default stream).
func (e *Event) Record(s *Stream) error {
	return cudaErr(e.rt.api, e.rt.api.eventRecord(e.dev, e.handle, s.Handle()), "cudaEventRecord on device %d", e.dev)
}

// Synchronize waits until the work before the recorded point has finished.
func (e *Event) Synchronize() error {
	return cudaErr(e.rt.api, e.rt.api.eventSync(e.handle), "cudaEventSynchronize on device %d", e.dev)
}

// Done reports, without waiting, whether the work before the recorded
// point has finished (cudaEventQuery; cudaErrorNotReady is "false, nil").
func (e *Event) Done() (bool, error) {
	code := e.rt.api.eventQuery(e.handle)
	if code == cudaErrorNotReady {
		return false, nil
	}
	if err := cudaErr(e.rt.api, code, "cudaEventQuery on device %d", e.dev); err != nil {
		return false, err
	}
	return true, nil
}

// Since returns the device time between start and e, both recorded and
// complete, with CUDA's resolution of about half a microsecond.
func (e *Event) Since(start *Event) (time.Duration, error) {
	ms, code := e.rt.api.eventElapsed(start.handle, e.handle)
	if err := cudaErr(e.rt.api, code, "cudaEventElapsedTime on device %d", e.dev); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	return cudaErr(e.rt.api, e.rt.api.eventDestroy(e.handle), "cudaEventDestroy on device %d", e.dev)
}
