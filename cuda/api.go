package cuda

import "unsafe"

// cudartAPI is the CUDA runtime's C entry points as the shim exposes them.
// Every int result named code is a cudaError_t. Calls that take dev make that
// device current first, on the host thread that makes the call (the
// goroutine is locked to it for the pair), because the current device is
// per thread and goroutines move between threads. The purego shim
// (shim.go) implements it; tests implement it over host memory to exercise
// the Go half of the real path without a GPU.
type cudartAPI interface {
	deviceCount() (n, code int)
	runtimeVersion() (v, code int)
	driverVersion() (v, code int)
	errorString(code int) string
	errorName(code int) string
	malloc(dev, n int) (p uintptr, code int)
	free(dev int, p uintptr) int
	mallocHost(dev, n int) (p unsafe.Pointer, code int)
	freeHost(p unsafe.Pointer) int
	memcpyHtoD(dev int, dst uintptr, src unsafe.Pointer, n int, stream uintptr, async bool) int
	memcpyDtoH(dev int, dst unsafe.Pointer, src uintptr, n int, stream uintptr, async bool) int
	memcpyDtoD(dev int, dst, src uintptr, n int, stream uintptr, async bool) int
	memset(dev int, dst uintptr, v byte, n int, stream uintptr, async bool) int
	streamCreate(dev int, flags uint) (s uintptr, code int)
	streamSync(dev int, s uintptr) int
	streamDestroy(dev int, s uintptr) int
	// streamWaitEvent makes later work on s wait for e's recorded point.
	streamWaitEvent(dev int, s, e uintptr) int
	// hasMemcpyBatch reports whether the library has cudaMemcpyBatchAsync
	// (CUDA 12.8 and later).
	hasMemcpyBatch() bool
	// memcpyBatch queues the copies dsts[i] <- srcs[i] of sizes[i] bytes,
	// in stream order with the rest of s, as one cudaMemcpyBatchAsync;
	// failIdx is the copy an error concerns (or ^0).
	memcpyBatch(dev int, dsts, srcs, sizes []uintptr, s uintptr) (failIdx uintptr, code int)
	eventCreate(dev int, flags uint) (e uintptr, code int)
	eventRecord(dev int, e, s uintptr) int
	eventSync(e uintptr) int
	eventQuery(e uintptr) int
	eventElapsed(start, end uintptr) (ms float32, code int)
	eventDestroy(e uintptr) int
	deviceSync(dev int) int
	memInfo(dev int) (free, total uint64, code int)
	attribute(dev, attr int) (v, code int)
	pciBusID(dev int) (id string, code int)
}

// ncclAPI is NCCL's C entry points as the shim exposes them. Every int
// result named code is an ncclResult_t.
type ncclAPI interface {
	version() (v, code int)
	uniqueID() (id UniqueID, code int)
	// commInitRank makes dev current and calls ncclCommInitRank on the
	// same thread; cudaCode is set when making the device current failed.
	commInitRank(dev, nranks int, id UniqueID, rank int) (comm uintptr, cudaCode, code int)
	commDestroy(c uintptr) int
	commAbort(c uintptr) int
	commQuery(q commQuery, c uintptr) (v, code int)
	errorString(code int) string
	lastError(c uintptr) string
	allReduce(send, recv uintptr, count int, dt, op int, c, s uintptr) int
	broadcast(send, recv uintptr, count int, dt, root int, c, s uintptr) int
	reduce(send, recv uintptr, count int, dt, op, root int, c, s uintptr) int
	allGather(send, recv uintptr, count int, dt int, c, s uintptr) int
	reduceScatter(send, recv uintptr, count int, dt, op int, c, s uintptr) int
	send(buf uintptr, count int, dt, peer int, c, s uintptr) int
	recv(buf uintptr, count int, dt, peer int, c, s uintptr) int
	groupStart() int
	groupEnd() int
}

// commQuery selects one of NCCL's integer communicator queries.
type commQuery int

const (
	queryCount      commQuery = iota // ncclCommCount
	queryDevice                      // ncclCommCuDevice
	queryRank                        // ncclCommUserRank
	queryAsyncError                  // ncclCommGetAsyncError
)

// loader opens shared libraries and resolves their symbols (dlopen/dlsym).
type loader interface {
	open(path string) (handle uintptr, err error)
	sym(handle uintptr, name string) (uintptr, error)
	close(handle uintptr)
	// where names the file that holds the symbol at addr.
	where(addr uintptr) string
	cudartSymbols() []string
	ncclSymbols() []string
}

// CUDA runtime and NCCL constants the package uses (values from
// cuda_runtime_api.h's and nccl.h's enums, stable from CUDA 10 to 13 and
// NCCL 2.7 on).
const (
	cudaSuccess                 = 0
	cudaErrorInvalidValue       = 1
	cudaErrorMemoryAllocation   = 2
	cudaErrorStubLibrary        = 34
	cudaErrorInsufficientDriver = 35
	// cudaErrorCallRequiresNewerDriver: the runtime has the entry point,
	// the driver does not.
	cudaErrorCallRequiresNewerDriver = 36
	cudaErrorNoDevice                = 100
	cudaErrorNotSupported            = 801
	cudaErrorNotReady                = 600

	cudaStreamNonBlocking  = 0x1
	cudaEventDisableTiming = 0x2

	cudaDevAttrMultiProcessorCount    = 16
	cudaDevAttrComputeCapabilityMajor = 75
	cudaDevAttrComputeCapabilityMinor = 76

	// cudaMemcpyBatchAsync exists from CUDA 12.8; CUDA 13.0 dropped its
	// failIdx parameter.
	cudartOptionalSymbolMemcpyBatch = "cudaMemcpyBatchAsync"
	cudaVersionMemcpyBatchNoFailIdx = 13000
	// cudaMemcpySrcAccessOrderStream: a batched copy reads its source in
	// stream order.
	cudaMemcpySrcAccessOrderStream = 1

	ncclSuccess      = 0
	ncclInvalidUsage = 5

	// ncclGetLastError exists from NCCL 2.13; older libraries load without it.
	ncclOptionalSymbolGetLastError = "ncclGetLastError"
	ncclMinVersionBFloat16         = 21000 // NCCL 2.10.0, in ncclCode's encoding
	ncclMinVersionSendRecv         = 20700 // NCCL 2.7.0
	// ncclVersionNewScheme: codes from NCCL 2.9 on are 10000*major +
	// 100*minor + patch, so at least this; older ones are 1000*major + ...
	ncclVersionNewScheme = 10000
)
