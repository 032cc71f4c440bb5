//go:build linux && (amd64 || arm64) && !nogpu

package cuda

import (
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The shim calls the CUDA runtime and NCCL through function pointers
// resolved with dlsym, using purego: no cgo, no C compiler, no CUDA header
// at build time, and a CGO_ENABLED=0 binary loads the libraries as well as
// a cgo one. Every entry point takes integers and pointers and returns an
// int error code, which purego.SyscallN passes in registers as the C ABI
// does; the one exception, ncclCommInitRank's 128-byte ncclUniqueId passed
// by value, is handled per architecture (ncclinit_*.go).

const dlopenSupported = true

// The symbols the package resolves. The first is the one a library that
// is not the CUDA runtime (or NCCL) is reported to lack.
var cudartSymbolNames = []string{
	"cudaGetDeviceCount", "cudaSetDevice", "cudaRuntimeGetVersion", "cudaDriverGetVersion",
	"cudaGetErrorString", "cudaGetErrorName", "cudaMalloc", "cudaFree", "cudaMallocHost",
	"cudaFreeHost", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync",
	"cudaStreamCreateWithFlags", "cudaStreamSynchronize", "cudaStreamDestroy",
	"cudaEventCreateWithFlags", "cudaEventRecord", "cudaEventSynchronize", "cudaEventQuery",
	"cudaEventElapsedTime", "cudaEventDestroy", "cudaDeviceSynchronize", "cudaMemGetInfo",
	"cudaDeviceGetAttribute", "cudaDeviceGetPCIBusId", "cudaStreamWaitEvent",
	cudartOptionalSymbolMemcpyBatch,
}

var ncclSymbolNames = []string{
	"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclCommAbort",
	"ncclCommCount", "ncclCommCuDevice", "ncclCommUserRank", "ncclCommGetAsyncError",
	"ncclGetErrorString", "ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather",
	"ncclReduceScatter", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
	ncclOptionalSymbolGetLastError,
}

// dlLoader opens libraries with dlopen and resolves symbols with dlsym
// (through purego, which reads dlerror on the same thread).
type dlLoader struct{}

func systemLoader() loader { return dlLoader{} }

func (dlLoader) open(path string) (uintptr, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return 0, dlError(err.Error())
	}
	if h == 0 {
		return 0, dlError("dlopen returned NULL")
	}
	return h, nil
}

func (dlLoader) sym(h uintptr, name string) (uintptr, error) {
	p, err := purego.Dlsym(h, name)
	if err != nil {
		return 0, dlError(err.Error())
	}
	if p == 0 {
		return 0, dlError("symbol is NULL")
	}
	return p, nil
}

func (dlLoader) close(h uintptr) { _ = purego.Dlclose(h) }

func (dlLoader) cudartSymbols() []string { return cudartSymbolNames }
func (dlLoader) ncclSymbols() []string   { return ncclSymbolNames }

// dlInfo is glibc's Dl_info.
type dlInfo struct {
	fname *byte
	fbase unsafe.Pointer
	sname *byte
	saddr unsafe.Pointer
}

var dladdr func(addr uintptr, info *dlInfo) int32

func init() {
	for _, lib := range []string{"libc.so.6", "libdl.so.2"} {
		h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			continue
		}
		if p, err := purego.Dlsym(h, "dladdr"); err == nil && p != 0 {
			purego.RegisterFunc(&dladdr, p)
			return
		}
	}
}

// where names the file a resolved symbol lives in (dladdr), or "".
func (dlLoader) where(sym uintptr) string {
	if sym == 0 || dladdr == nil {
		return ""
	}
	var info dlInfo
	if dladdr(sym, &info) == 0 {
		return ""
	}
	return cString(info.fname)
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// call calls the C function at fn with integer and pointer arguments and
// returns its int result. Pointers converted to uintptr in the call are
// kept alive and unmoved for its duration (go:uintptrescapes).
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int {
	r, _, _ := purego.SyscallN(fn, args...)
	return int(int32(r))
}

func iarg(v int) uintptr { return uintptr(v) }

// syms maps names to resolved addresses.
func syms(names []string, addrs []uintptr) map[string]uintptr {
	m := make(map[string]uintptr, len(names))
	for i, n := range names {
		m[n] = addrs[i]
	}
	return m
}

// cudartLib calls the CUDA runtime through resolved function pointers.
type cudartLib struct {
	setDevice, deviceCountFn, runtimeVersionFn, driverVersionFn          uintptr
	mallocFn, freeFn, mallocHostFn, freeHostFn                           uintptr
	memcpyFn, memcpyAsyncFn, memsetFn, memsetAsyncFn                     uintptr
	streamCreateFn, streamSyncFn, streamDestroyFn                        uintptr
	eventCreateFn, eventRecordFn, eventSyncFn, eventQueryFn              uintptr
	eventElapsedFn, eventDestroyFn, deviceSyncFn, memInfoFn, attributeFn uintptr
	pciBusIDFn, streamWaitEventFn, memcpyBatchFn                         uintptr
	batchFailIdx                                                         bool // the 12.x signature of cudaMemcpyBatchAsync
	errorStringFn, errorNameFn                                           func(int32) string
}

func newCudartAPI(addrs []uintptr) cudartAPI {
	m := syms(cudartSymbolNames, addrs)
	l := &cudartLib{
		setDevice: m["cudaSetDevice"], deviceCountFn: m["cudaGetDeviceCount"], runtimeVersionFn: m["cudaRuntimeGetVersion"],
		driverVersionFn: m["cudaDriverGetVersion"], mallocFn: m["cudaMalloc"], freeFn: m["cudaFree"],
		mallocHostFn: m["cudaMallocHost"], freeHostFn: m["cudaFreeHost"], memcpyFn: m["cudaMemcpy"],
		memcpyAsyncFn: m["cudaMemcpyAsync"], memsetFn: m["cudaMemset"], memsetAsyncFn: m["cudaMemsetAsync"],
		streamCreateFn: m["cudaStreamCreateWithFlags"], streamSyncFn: m["cudaStreamSynchronize"],
		streamDestroyFn: m["cudaStreamDestroy"], eventCreateFn: m["cudaEventCreateWithFlags"],
		eventRecordFn: m["cudaEventRecord"], eventSyncFn: m["cudaEventSynchronize"], eventQueryFn: m["cudaEventQuery"],
		eventElapsedFn: m["cudaEventElapsedTime"], eventDestroyFn: m["cudaEventDestroy"],
		deviceSyncFn: m["cudaDeviceSynchronize"], memInfoFn: m["cudaMemGetInfo"], attributeFn: m["cudaDeviceGetAttribute"],
		pciBusIDFn: m["cudaDeviceGetPCIBusId"], streamWaitEventFn: m["cudaStreamWaitEvent"],
		memcpyBatchFn: m[cudartOptionalSymbolMemcpyBatch],
	}
	purego.RegisterFunc(&l.errorStringFn, m["cudaGetErrorString"])
	purego.RegisterFunc(&l.errorNameFn, m["cudaGetErrorName"])
	if l.memcpyBatchFn != 0 {
		// The signature changed in CUDA 13.0: the runtime's version says
		// which one this library has. Unknown: no batching.
		v, code := l.runtimeVersion()
		switch {
		case code != 0:
			l.memcpyBatchFn = 0
		case v < cudaVersionMemcpyBatchNoFailIdx:
			l.batchFailIdx = true
		}
	}
	return l
}

// onDevice makes dev current and runs f on the same host thread: the
// current device is per thread, and a goroutine may move between threads
// from one C call to the next.
func (l *cudartLib) onDevice(dev int, f func() int) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if code := call(l.setDevice, iarg(dev)); code != 0 {
		return code
	}
	return f()
}

func (l *cudartLib) deviceCount() (int, int) {
	var n int32
	code := call(l.deviceCountFn, uintptr(unsafe.Pointer(&n)))
	return int(n), code
}

func (l *cudartLib) runtimeVersion() (int, int) {
	var v int32
	code := call(l.runtimeVersionFn, uintptr(unsafe.Pointer(&v)))
	return int(v), code
}

func (l *cudartLib) driverVersion() (int, int) {
	var v int32
	code := call(l.driverVersionFn, uintptr(unsafe.Pointer(&v)))
	return int(v), code
}

func (l *cudartLib) errorString(code int) string { return l.errorStringFn(int32(code)) }
func (l *cudartLib) errorName(code int) string   { return l.errorNameFn(int32(code)) }

func (l *cudartLib) malloc(dev, n int) (uintptr, int) {
	var p uintptr
	code := l.onDevice(dev, func() int { return call(l.mallocFn, uintptr(unsafe.Pointer(&p)), uintptr(n)) })
	return p, code
}

func (l *cudartLib) free(dev int, p uintptr) int {
	return l.onDevice(dev, func() int { return call(l.freeFn, p) })
}

func (l *cudartLib) mallocHost(dev, n int) (unsafe.Pointer, int) {
	var p unsafe.Pointer
	code := l.onDevice(dev, func() int { return call(l.mallocHostFn, uintptr(unsafe.Pointer(&p)), uintptr(n)) })
	return p, code
}

func (l *cudartLib) freeHost(p unsafe.Pointer) int { return call(l.freeHostFn, uintptr(p)) }

// cudaMemcpyKind values.
const (
	memcpyHostToDevice   = 1
	memcpyDeviceToHost   = 2
	memcpyDeviceToDevice = 3
)

func (l *cudartLib) memcpy(dev int, dst, src uintptr, n, kind int, s uintptr, async bool) int {
	return l.onDevice(dev, func() int {
		if async {
			return call(l.memcpyAsyncFn, dst, src, uintptr(n), iarg(kind), s)
		}
		return call(l.memcpyFn, dst, src, uintptr(n), iarg(kind))
	})
}

func (l *cudartLib) memcpyHtoD(dev int, dst uintptr, src unsafe.Pointer, n int, s uintptr, async bool) int {
	code := l.memcpy(dev, dst, uintptr(src), n, memcpyHostToDevice, s, async)
	runtime.KeepAlive(src)
	return code
}

func (l *cudartLib) memcpyDtoH(dev int, dst unsafe.Pointer, src uintptr, n int, s uintptr, async bool) int {
	code := l.memcpy(dev, uintptr(dst), src, n, memcpyDeviceToHost, s, async)
	runtime.KeepAlive(dst)
	return code
}

func (l *cudartLib) memcpyDtoD(dev int, dst, src uintptr, n int, s uintptr, async bool) int {
	return l.memcpy(dev, dst, src, n, memcpyDeviceToDevice, s, async)
}

func (l *cudartLib) memset(dev int, dst uintptr, v byte, n int, s uintptr, async bool) int {
	return l.onDevice(dev, func() int {
		if async {
			return call(l.memsetAsyncFn, dst, uintptr(v), uintptr(n), s)
		}
		return call(l.memsetFn, dst, uintptr(v), uintptr(n))
	})
}

func (l *cudartLib) streamCreate(dev int, flags uint) (uintptr, int) {
	var s uintptr
	code := l.onDevice(dev, func() int { return call(l.streamCreateFn, uintptr(unsafe.Pointer(&s)), uintptr(flags)) })
	return s, code
}

func (l *cudartLib) streamSync(dev int, s uintptr) int {
	return l.onDevice(dev, func() int { return call(l.streamSyncFn, s) })
}

func (l *cudartLib) streamDestroy(dev int, s uintptr) int {
	return l.onDevice(dev, func() int { return call(l.streamDestroyFn, s) })
}

func (l *cudartLib) streamWaitEvent(dev int, s, e uintptr) int {
	return l.onDevice(dev, func() int { return call(l.streamWaitEventFn, s, e, 0) })
}

func (l *cudartLib) hasMemcpyBatch() bool { return l.memcpyBatchFn != 0 }

// memcpyAttributes is cudaMemcpyAttributes: the source access order, the
// source and destination location hints (cudaMemLocation: type, id;
// ignored for cudaMalloc'd memory) and flags.
type memcpyAttributes struct {
	srcAccessOrder       int32
	srcLocType, srcLocID int32
	dstLocType, dstLocID int32
	flags                uint32
}

// memcpyBatch calls cudaMemcpyBatchAsync(dsts, srcs, sizes, count, attrs,
// attrsIdxs, numAttrs, [failIdx,] stream) with one attribute for every
// copy: read the source in stream order.
func (l *cudartLib) memcpyBatch(dev int, dsts, srcs, sizes []uintptr, s uintptr) (uintptr, int) {
	fail := ^uintptr(0)
	if len(dsts) == 0 {
		return fail, 0
	}
	attrs := &[1]memcpyAttributes{{srcAccessOrder: cudaMemcpySrcAccessOrderStream}}
	idxs := &[1]uintptr{0}
	failp := &fail
	code := l.onDevice(dev, func() int {
		if l.batchFailIdx {
			return call(l.memcpyBatchFn, uintptr(unsafe.Pointer(&dsts[0])), uintptr(unsafe.Pointer(&srcs[0])),
				uintptr(unsafe.Pointer(&sizes[0])), uintptr(len(dsts)), uintptr(unsafe.Pointer(attrs)),
				uintptr(unsafe.Pointer(idxs)), 1, uintptr(unsafe.Pointer(failp)), s)
		}
		return call(l.memcpyBatchFn, uintptr(unsafe.Pointer(&dsts[0])), uintptr(unsafe.Pointer(&srcs[0])),
			uintptr(unsafe.Pointer(&sizes[0])), uintptr(len(dsts)), uintptr(unsafe.Pointer(attrs)),
			uintptr(unsafe.Pointer(idxs)), 1, s)
	})
	return fail, code
}

func (l *cudartLib) eventCreate(dev int, flags uint) (uintptr, int) {
	var e uintptr
	code := l.onDevice(dev, func() int { return call(l.eventCreateFn, uintptr(unsafe.Pointer(&e)), uintptr(flags)) })
	return e, code
}

func (l *cudartLib) eventRecord(dev int, e, s uintptr) int {
	return l.onDevice(dev, func() int { return call(l.eventRecordFn, e, s) })
}

func (l *cudartLib) eventSync(e uintptr) int    { return call(l.eventSyncFn, e) }
func (l *cudartLib) eventQuery(e uintptr) int   { return call(l.eventQueryFn, e) }
func (l *cudartLib) eventDestroy(e uintptr) int { return call(l.eventDestroyFn, e) }

func (l *cudartLib) eventElapsed(start, end uintptr) (float32, int) {
	var ms float32
	code := call(l.eventElapsedFn, uintptr(unsafe.Pointer(&ms)), start, end)
	return ms, code
}

func (l *cudartLib) deviceSync(dev int) int {
	return l.onDevice(dev, func() int { return call(l.deviceSyncFn) })
}

func (l *cudartLib) memInfo(dev int) (uint64, uint64, int) {
	var fr, tot uintptr // size_t
	code := l.onDevice(dev, func() int {
		return call(l.memInfoFn, uintptr(unsafe.Pointer(&fr)), uintptr(unsafe.Pointer(&tot)))
	})
	return uint64(fr), uint64(tot), code
}

func (l *cudartLib) attribute(dev, attr int) (int, int) {
	var v int32
	code := call(l.attributeFn, uintptr(unsafe.Pointer(&v)), iarg(attr), iarg(dev))
	return int(v), code
}

func (l *cudartLib) pciBusID(dev int) (string, int) {
	var buf [64]byte
	code := call(l.pciBusIDFn, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), iarg(dev))
	if code != 0 {
		return "", code
	}
	return cString(&buf[0]), 0
}

// ncclLib calls NCCL through resolved function pointers; rt is the CUDA
// runtime, for making a device current.
type ncclLib struct {
	rt                                                         *cudartLib
	versionFn, uniqueIDFn, commInitRankFn, commDestroyFn       uintptr
	commAbortFn, commCountFn, commCuDeviceFn, commUserRankFn   uintptr
	commAsyncErrorFn, allReduceFn, broadcastFn, reduceFn       uintptr
	allGatherFn, reduceScatterFn, sendFn, recvFn, groupStartFn uintptr
	groupEndFn                                                 uintptr
	errorStringFn                                              func(int32) string
	lastErrorFn                                                func(uintptr) string
}

func newNCCLAPI(rt cudartAPI, addrs []uintptr) ncclAPI {
	m := syms(ncclSymbolNames, addrs)
	l := &ncclLib{
		versionFn: m["ncclGetVersion"], uniqueIDFn: m["ncclGetUniqueId"], commInitRankFn: m["ncclCommInitRank"],
		commDestroyFn: m["ncclCommDestroy"], commAbortFn: m["ncclCommAbort"], commCountFn: m["ncclCommCount"],
		commCuDeviceFn: m["ncclCommCuDevice"], commUserRankFn: m["ncclCommUserRank"],
		commAsyncErrorFn: m["ncclCommGetAsyncError"], allReduceFn: m["ncclAllReduce"], broadcastFn: m["ncclBroadcast"],
		reduceFn: m["ncclReduce"], allGatherFn: m["ncclAllGather"], reduceScatterFn: m["ncclReduceScatter"],
		sendFn: m["ncclSend"], recvFn: m["ncclRecv"], groupStartFn: m["ncclGroupStart"], groupEndFn: m["ncclGroupEnd"],
	}
	l.rt, _ = rt.(*cudartLib)
	purego.RegisterFunc(&l.errorStringFn, m["ncclGetErrorString"])
	if p := m[ncclOptionalSymbolGetLastError]; p != 0 {
		purego.RegisterFunc(&l.lastErrorFn, p)
	}
	return l
}

func (l *ncclLib) version() (int, int) {
	var v int32
	code := call(l.versionFn, uintptr(unsafe.Pointer(&v)))
	return int(v), code
}

func (l *ncclLib) uniqueID() (UniqueID, int) {
	id := new(UniqueID)
	code := call(l.uniqueIDFn, uintptr(unsafe.Pointer(id)))
	return *id, code
}

func (l *ncclLib) commInitRank(dev, nranks int, id UniqueID, rank int) (uintptr, int, int) {
	if l.rt == nil {
		return 0, 0, ncclInvalidUsage
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if code := call(l.rt.setDevice, iarg(dev)); code != 0 {
		return 0, code, 0
	}
	var c uintptr
	code := commInitRankByValue(l.commInitRankFn, &c, nranks, &id, rank)
	return c, 0, code
}

func (l *ncclLib) commDestroy(c uintptr) int { return call(l.commDestroyFn, c) }
func (l *ncclLib) commAbort(c uintptr) int   { return call(l.commAbortFn, c) }

func (l *ncclLib) commQuery(q commQuery, c uintptr) (int, int) {
	fn := [...]uintptr{queryCount: l.commCountFn, queryDevice: l.commCuDeviceFn, queryRank: l.commUserRankFn,
		queryAsyncError: l.commAsyncErrorFn}[q]
	var v int32
	code := call(fn, c, uintptr(unsafe.Pointer(&v)))
	return int(v), code
}

func (l *ncclLib) errorString(code int) string { return l.errorStringFn(int32(code)) }

func (l *ncclLib) lastError(c uintptr) string {
	if l.lastErrorFn == nil {
		return ""
	}
	return l.lastErrorFn(c)
}

func (l *ncclLib) allReduce(send, recv uintptr, count int, dt, op int, c, s uintptr) int {
	return call(l.allReduceFn, send, recv, uintptr(count), iarg(dt), iarg(op), c, s)
}

func (l *ncclLib) broadcast(send, recv uintptr, count int, dt, root int, c, s uintptr) int {
	return call(l.broadcastFn, send, recv, uintptr(count), iarg(dt), iarg(root), c, s)
}

func (l *ncclLib) reduce(send, recv uintptr, count int, dt, op, root int, c, s uintptr) int {
	return call(l.reduceFn, send, recv, uintptr(count), iarg(dt), iarg(op), iarg(root), c, s)
}

func (l *ncclLib) allGather(send, recv uintptr, count int, dt int, c, s uintptr) int {
	return call(l.allGatherFn, send, recv, uintptr(count), iarg(dt), c, s)
}

func (l *ncclLib) reduceScatter(send, recv uintptr, count int, dt, op int, c, s uintptr) int {
	return call(l.reduceScatterFn, send, recv, uintptr(count), iarg(dt), iarg(op), c, s)
}

func (l *ncclLib) send(buf uintptr, count int, dt, peer int, c, s uintptr) int {
	return call(l.sendFn, buf, uintptr(count), iarg(dt), iarg(peer), c, s)
}

func (l *ncclLib) recv(buf uintptr, count int, dt, peer int, c, s uintptr) int {
	return call(l.recvFn, buf, uintptr(count), iarg(dt), iarg(peer), c, s)
}

func (l *ncclLib) groupStart() int { return call(l.groupStartFn) }
func (l *ncclLib) groupEnd() int   { return call(l.groupEndFn) }
