//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The shim declares only what it calls: handles are opaque pointers, enums
// are int, ncclUniqueId is 128 bytes passed by value. Every entry point is
// resolved with dlsym into a table indexed by the enums below, so that no
// CUDA header or library is needed at build time.

#define GH_CUDART_SYMS(X) \
	X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaRuntimeGetVersion) X(cudaDriverGetVersion) \
	X(cudaGetErrorString) X(cudaGetErrorName) X(cudaMalloc) X(cudaFree) X(cudaMallocHost) \
	X(cudaFreeHost) X(cudaMemcpy) X(cudaMemcpyAsync) X(cudaMemset) X(cudaMemsetAsync) \
	X(cudaStreamCreateWithFlags) X(cudaStreamSynchronize) X(cudaStreamDestroy) \
	X(cudaEventCreateWithFlags) X(cudaEventRecord) X(cudaEventSynchronize) X(cudaEventQuery) \
	X(cudaEventElapsedTime) X(cudaEventDestroy) X(cudaDeviceSynchronize) X(cudaMemGetInfo) \
	X(cudaDeviceGetAttribute) X(cudaDeviceGetPCIBusId)

#define GH_NCCL_SYMS(X) \
	X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort) \
	X(ncclCommCount) X(ncclCommCuDevice) X(ncclCommUserRank) X(ncclCommGetAsyncError) \
	X(ncclGetErrorString) X(ncclAllReduce) X(ncclBroadcast) X(ncclReduce) X(ncclAllGather) \
	X(ncclReduceScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd) \
	X(ncclGetLastError)

#define GH_ENUM(n) GH_##n,
#define GH_NAME(n) #n,
enum { GH_CUDART_SYMS(GH_ENUM) GH_CUDART_N };
enum { GH_NCCL_SYMS(GH_ENUM) GH_NCCL_N };
static const char *const gh_cudart_names[] = { GH_CUDART_SYMS(GH_NAME) };
static const char *const gh_nccl_names[] = { GH_NCCL_SYMS(GH_NAME) };

static const char *gh_cudart_name(int i) { return gh_cudart_names[i]; }
static const char *gh_nccl_name(int i) { return gh_nccl_names[i]; }
static int gh_cudart_n(void) { return GH_CUDART_N; }
static int gh_nccl_n(void) { return GH_NCCL_N; }

static void **gh_table(int n) { return (void **)calloc((size_t)n, sizeof(void *)); }
static void gh_table_set(void **t, int i, uintptr_t p) { t[i] = (void *)p; }

// dlopen/dlsym and dlerror run in one C call, on one thread, because
// dlerror's state is per thread.
static uintptr_t gh_dlopen(const char *path, char *err, size_t n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		strncpy(err, e ? e : "unknown dlopen error", n - 1);
		err[n - 1] = 0;
	}
	return (uintptr_t)h;
}

static uintptr_t gh_dlsym(uintptr_t h, const char *name, char *err, size_t n) {
	dlerror();
	void *p = dlsym((void *)h, name);
	const char *e = dlerror();
	if (e || !p) {
		strncpy(err, e ? e : "symbol is NULL", n - 1);
		err[n - 1] = 0;
		return 0;
	}
	return (uintptr_t)p;
}

static void gh_dlclose(uintptr_t h) { dlclose((void *)h); }

// gh_where names the file a resolved symbol lives in.
static const char *gh_where(uintptr_t sym) {
	Dl_info info;
	if (sym && dladdr((void *)sym, &info) && info.dli_fname) return info.dli_fname;
	return "";
}

typedef int (*gh_i_pi)(int *);
typedef int (*gh_i_i)(int);
typedef int (*gh_i_v)(void);
typedef int (*gh_i_p)(void *);
typedef const char *(*gh_s_i)(int);

#define CT(t, n, type) ((type)(t)[GH_##n])

static int gh_setdev(void **t, int dev) { return CT(t, cudaSetDevice, gh_i_i)(dev); }

static int gh_device_count(void **t, int *n) { return CT(t, cudaGetDeviceCount, gh_i_pi)(n); }
static int gh_runtime_version(void **t, int *v) { return CT(t, cudaRuntimeGetVersion, gh_i_pi)(v); }
static int gh_driver_version(void **t, int *v) { return CT(t, cudaDriverGetVersion, gh_i_pi)(v); }
static const char *gh_error_string(void **t, int e) { return CT(t, cudaGetErrorString, gh_s_i)(e); }
static const char *gh_error_name(void **t, int e) { return CT(t, cudaGetErrorName, gh_s_i)(e); }

static int gh_malloc(void **t, int dev, uintptr_t *p, size_t n) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	void *q = NULL;
	e = CT(t, cudaMalloc, int (*)(void **, size_t))(&q, n);
	*p = (uintptr_t)q;
	return e;
}

static int gh_free(void **t, int dev, uintptr_t p) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	return CT(t, cudaFree, gh_i_p)((void *)p);
}

static int gh_malloc_host(void **t, int dev, void **p, size_t n) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	return CT(t, cudaMallocHost, int (*)(void **, size_t))(p, n);
}

static int gh_free_host(void **t, void *p) { return CT(t, cudaFreeHost, gh_i_p)(p); }

// kind is a cudaMemcpyKind: 1 host to device, 2 device to host, 3 device to device.
static int gh_memcpy(void **t, int dev, void *dst, const void *src, size_t n, int kind, uintptr_t stream, int async) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	if (async)
		return CT(t, cudaMemcpyAsync, int (*)(void *, const void *, size_t, int, void *))(dst, src, n, kind, (void *)stream);
	return CT(t, cudaMemcpy, int (*)(void *, const void *, size_t, int))(dst, src, n, kind);
}

static int gh_memcpy_htod(void **t, int dev, uintptr_t dst, const void *src, size_t n, uintptr_t s, int async) {
	return gh_memcpy(t, dev, (void *)dst, src, n, 1, s, async);
}
static int gh_memcpy_dtoh(void **t, int dev, void *dst, uintptr_t src, size_t n, uintptr_t s, int async) {
	return gh_memcpy(t, dev, dst, (const void *)src, n, 2, s, async);
}
static int gh_memcpy_dtod(void **t, int dev, uintptr_t dst, uintptr_t src, size_t n, uintptr_t s, int async) {
	return gh_memcpy(t, dev, (void *)dst, (const void *)src, n, 3, s, async);
}

static int gh_memset(void **t, int dev, uintptr_t dst, int v, size_t n, uintptr_t stream, int async) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	if (async)
		return CT(t, cudaMemsetAsync, int (*)(void *, int, size_t, void *))((void *)dst, v, n, (void *)stream);
	return CT(t, cudaMemset, int (*)(void *, int, size_t))((void *)dst, v, n);
}

static int gh_stream_create(void **t, int dev, uintptr_t *s, unsigned flags) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	void *q = NULL;
	e = CT(t, cudaStreamCreateWithFlags, int (*)(void **, unsigned))(&q, flags);
	*s = (uintptr_t)q;
	return e;
}

static int gh_stream_sync(void **t, int dev, uintptr_t s) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	return CT(t, cudaStreamSynchronize, gh_i_p)((void *)s);
}

static int gh_stream_destroy(void **t, int dev, uintptr_t s) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	return CT(t, cudaStreamDestroy, gh_i_p)((void *)s);
}

static int gh_event_create(void **t, int dev, uintptr_t *ev, unsigned flags) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	void *q = NULL;
	e = CT(t, cudaEventCreateWithFlags, int (*)(void **, unsigned))(&q, flags);
	*ev = (uintptr_t)q;
	return e;
}

static int gh_event_record(void **t, int dev, uintptr_t ev, uintptr_t s) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	return CT(t, cudaEventRecord, int (*)(void *, void *))((void *)ev, (void *)s);
}

static int gh_event_sync(void **t, uintptr_t ev) { return CT(t, cudaEventSynchronize, gh_i_p)((void *)ev); }
static int gh_event_query(void **t, uintptr_t ev) { return CT(t, cudaEventQuery, gh_i_p)((void *)ev); }
static int gh_event_destroy(void **t, uintptr_t ev) { return CT(t, cudaEventDestroy, gh_i_p)((void *)ev); }
static int gh_event_elapsed(void **t, float *ms, uintptr_t a, uintptr_t b) {
	return CT(t, cudaEventElapsedTime, int (*)(float *, void *, void *))(ms, (void *)a, (void *)b);
}

static int gh_device_sync(void **t, int dev) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	return CT(t, cudaDeviceSynchronize, gh_i_v)();
}

static int gh_mem_info(void **t, int dev, size_t *fr, size_t *tot) {
	int e = gh_setdev(t, dev);
	if (e) return e;
	return CT(t, cudaMemGetInfo, int (*)(size_t *, size_t *))(fr, tot);
}

static int gh_attribute(void **t, int dev, int attr, int *v) {
	return CT(t, cudaDeviceGetAttribute, int (*)(int *, int, int))(v, attr, dev);
}

static int gh_pci_bus_id(void **t, int dev, char *buf, int n) {
	return CT(t, cudaDeviceGetPCIBusId, int (*)(char *, int, int))(buf, n, dev);
}

// NCCL.

typedef struct { char internal[128]; } gh_uid;

#define NT(t, n, type) ((type)(t)[GH_##n])

static int gh_nccl_version(void **t, int *v) { return NT(t, ncclGetVersion, gh_i_pi)(v); }
static int gh_nccl_unique_id(void **t, void *out) {
	gh_uid id;
	int e = NT(t, ncclGetUniqueId, int (*)(gh_uid *))(&id);
	memcpy(out, &id, sizeof id);
	return e;
}

// gh_nccl_init sets the device and initialises the communicator in one call,
// so that both happen on the same host thread (the current device is per thread).
static int gh_nccl_init(void **ct, void **t, int dev, uintptr_t *comm, int nranks, const void *uid, int rank) {
	int e = gh_setdev(ct, dev);
	if (e) return -e; // a CUDA error, negated to tell it apart
	gh_uid id;
	memcpy(&id, uid, sizeof id);
	void *c = NULL;
	e = NT(t, ncclCommInitRank, int (*)(void **, int, gh_uid, int))(&c, nranks, id, rank);
	*comm = (uintptr_t)c;
	return e;
}

static int gh_nccl_comm_destroy(void **t, uintptr_t c) { return NT(t, ncclCommDestroy, gh_i_p)((void *)c); }
static int gh_nccl_comm_abort(void **t, uintptr_t c) { return NT(t, ncclCommAbort, gh_i_p)((void *)c); }
static int gh_nccl_comm_int(void **t, int which, uintptr_t c, int *v) {
	typedef int (*f)(void *, int *);
	switch (which) {
	case 0: return NT(t, ncclCommCount, f)((void *)c, v);
	case 1: return NT(t, ncclCommCuDevice, f)((void *)c, v);
	case 2: return NT(t, ncclCommUserRank, f)((void *)c, v);
	default: return NT(t, ncclCommGetAsyncError, f)((void *)c, v);
	}
}
static const char *gh_nccl_error_string(void **t, int e) { return NT(t, ncclGetErrorString, gh_s_i)(e); }
static const char *gh_nccl_last_error(void **t, uintptr_t c) {
	if (!t[GH_ncclGetLastError]) return "";
	const char *s = NT(t, ncclGetLastError, const char *(*)(void *))((void *)c);
	return s ? s : "";
}

static int gh_nccl_all_reduce(void **t, uintptr_t s, uintptr_t r, size_t n, int dt, int op, uintptr_t c, uintptr_t st) {
	return NT(t, ncclAllReduce, int (*)(const void *, void *, size_t, int, int, void *, void *))(
		(const void *)s, (void *)r, n, dt, op, (void *)c, (void *)st);
}
static int gh_nccl_broadcast(void **t, uintptr_t s, uintptr_t r, size_t n, int dt, int root, uintptr_t c, uintptr_t st) {
	return NT(t, ncclBroadcast, int (*)(const void *, void *, size_t, int, int, void *, void *))(
		(const void *)s, (void *)r, n, dt, root, (void *)c, (void *)st);
}
static int gh_nccl_reduce(void **t, uintptr_t s, uintptr_t r, size_t n, int dt, int op, int root, uintptr_t c, uintptr_t st) {
	return NT(t, ncclReduce, int (*)(const void *, void *, size_t, int, int, int, void *, void *))(
		(const void *)s, (void *)r, n, dt, op, root, (void *)c, (void *)st);
}
static int gh_nccl_all_gather(void **t, uintptr_t s, uintptr_t r, size_t n, int dt, uintptr_t c, uintptr_t st) {
	return NT(t, ncclAllGather, int (*)(const void *, void *, size_t, int, void *, void *))(
		(const void *)s, (void *)r, n, dt, (void *)c, (void *)st);
}
static int gh_nccl_reduce_scatter(void **t, uintptr_t s, uintptr_t r, size_t n, int dt, int op, uintptr_t c, uintptr_t st) {
	return NT(t, ncclReduceScatter, int (*)(const void *, void *, size_t, int, int, void *, void *))(
		(const void *)s, (void *)r, n, dt, op, (void *)c, (void *)st);
}
static int gh_nccl_send(void **t, uintptr_t b, size_t n, int dt, int peer, uintptr_t c, uintptr_t st) {
	return NT(t, ncclSend, int (*)(const void *, size_t, int, int, void *, void *))(
		(const void *)b, n, dt, peer, (void *)c, (void *)st);
}
static int gh_nccl_recv(void **t, uintptr_t b, size_t n, int dt, int peer, uintptr_t c, uintptr_t st) {
	return NT(t, ncclRecv, int (*)(void *, size_t, int, int, void *, void *))(
		(void *)b, n, dt, peer, (void *)c, (void *)st);
}
static int gh_nccl_group_start(void **t) { return NT(t, ncclGroupStart, gh_i_v)(); }
static int gh_nccl_group_end(void **t) { return NT(t, ncclGroupEnd, gh_i_v)(); }
*/
import "C"

import (
	"unsafe"
)

const cgoEnabled = true

// errBufLen is the size of the buffer dlerror's message is copied into.
const errBufLen = 1024

// cgoLoader opens libraries with dlopen and resolves symbols with dlsym.
type cgoLoader struct{}

func (cgoLoader) open(path string) (uintptr, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var buf [errBufLen]C.char
	h := C.gh_dlopen(cp, &buf[0], errBufLen)
	if h == 0 {
		return 0, dlError(C.GoString(&buf[0]))
	}
	return uintptr(h), nil
}

func (cgoLoader) sym(h uintptr, name string) (uintptr, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var buf [errBufLen]C.char
	p := C.gh_dlsym(C.uintptr_t(h), cn, &buf[0], errBufLen)
	if p == 0 {
		return 0, dlError(C.GoString(&buf[0]))
	}
	return uintptr(p), nil
}

func (cgoLoader) close(h uintptr) { C.gh_dlclose(C.uintptr_t(h)) }

func (cgoLoader) where(sym uintptr) string { return C.GoString(C.gh_where(C.uintptr_t(sym))) }

func (cgoLoader) cudartSymbols() []string {
	out := make([]string, int(C.gh_cudart_n()))
	for i := range out {
		out[i] = C.GoString(C.gh_cudart_name(C.int(i)))
	}
	return out
}

func (cgoLoader) ncclSymbols() []string {
	out := make([]string, int(C.gh_nccl_n()))
	for i := range out {
		out[i] = C.GoString(C.gh_nccl_name(C.int(i)))
	}
	return out
}

// table copies resolved symbol addresses into a C table (never freed: a
// loaded library stays loaded for the life of the process).
func table(syms []uintptr) *unsafe.Pointer {
	t := C.gh_table(C.int(len(syms)))
	for i, p := range syms {
		C.gh_table_set(t, C.int(i), C.uintptr_t(p))
	}
	return t
}

func systemLoader() loader { return cgoLoader{} }

// cudartLib calls the CUDA runtime through a resolved symbol table.
type cudartLib struct{ t *unsafe.Pointer }

func newCudartAPI(syms []uintptr) cudartAPI { return &cudartLib{t: table(syms)} }

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func (l *cudartLib) deviceCount() (int, int) {
	var n C.int
	code := C.gh_device_count(l.t, &n)
	return int(n), int(code)
}

func (l *cudartLib) runtimeVersion() (int, int) {
	var v C.int
	code := C.gh_runtime_version(l.t, &v)
	return int(v), int(code)
}

func (l *cudartLib) driverVersion() (int, int) {
	var v C.int
	code := C.gh_driver_version(l.t, &v)
	return int(v), int(code)
}

func (l *cudartLib) errorString(code int) string {
	return C.GoString(C.gh_error_string(l.t, C.int(code)))
}

func (l *cudartLib) errorName(code int) string {
	return C.GoString(C.gh_error_name(l.t, C.int(code)))
}

func (l *cudartLib) malloc(dev, n int) (uintptr, int) {
	var p C.uintptr_t
	code := C.gh_malloc(l.t, C.int(dev), &p, C.size_t(n))
	return uintptr(p), int(code)
}

func (l *cudartLib) free(dev int, p uintptr) int {
	return int(C.gh_free(l.t, C.int(dev), C.uintptr_t(p)))
}

func (l *cudartLib) mallocHost(dev, n int) (unsafe.Pointer, int) {
	var p unsafe.Pointer
	code := C.gh_malloc_host(l.t, C.int(dev), &p, C.size_t(n))
	return p, int(code)
}

func (l *cudartLib) freeHost(p unsafe.Pointer) int { return int(C.gh_free_host(l.t, p)) }

func (l *cudartLib) memcpyHtoD(dev int, dst uintptr, src unsafe.Pointer, n int, s uintptr, async bool) int {
	return int(C.gh_memcpy_htod(l.t, C.int(dev), C.uintptr_t(dst), src, C.size_t(n), C.uintptr_t(s), cbool(async)))
}

func (l *cudartLib) memcpyDtoH(dev int, dst unsafe.Pointer, src uintptr, n int, s uintptr, async bool) int {
	return int(C.gh_memcpy_dtoh(l.t, C.int(dev), dst, C.uintptr_t(src), C.size_t(n), C.uintptr_t(s), cbool(async)))
}

func (l *cudartLib) memcpyDtoD(dev int, dst, src uintptr, n int, s uintptr, async bool) int {
	return int(C.gh_memcpy_dtod(l.t, C.int(dev), C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.uintptr_t(s), cbool(async)))
}

func (l *cudartLib) memset(dev int, dst uintptr, v byte, n int, s uintptr, async bool) int {
	return int(C.gh_memset(l.t, C.int(dev), C.uintptr_t(dst), C.int(v), C.size_t(n), C.uintptr_t(s), cbool(async)))
}

func (l *cudartLib) streamCreate(dev int, flags uint) (uintptr, int) {
	var s C.uintptr_t
	code := C.gh_stream_create(l.t, C.int(dev), &s, C.unsigned(flags))
	return uintptr(s), int(code)
}

func (l *cudartLib) streamSync(dev int, s uintptr) int {
	return int(C.gh_stream_sync(l.t, C.int(dev), C.uintptr_t(s)))
}

func (l *cudartLib) streamDestroy(dev int, s uintptr) int {
	return int(C.gh_stream_destroy(l.t, C.int(dev), C.uintptr_t(s)))
}

func (l *cudartLib) eventCreate(dev int, flags uint) (uintptr, int) {
	var e C.uintptr_t
	code := C.gh_event_create(l.t, C.int(dev), &e, C.unsigned(flags))
	return uintptr(e), int(code)
}

func (l *cudartLib) eventRecord(dev int, e, s uintptr) int {
	return int(C.gh_event_record(l.t, C.int(dev), C.uintptr_t(e), C.uintptr_t(s)))
}

func (l *cudartLib) eventSync(e uintptr) int  { return int(C.gh_event_sync(l.t, C.uintptr_t(e))) }
func (l *cudartLib) eventQuery(e uintptr) int { return int(C.gh_event_query(l.t, C.uintptr_t(e))) }
func (l *cudartLib) eventDestroy(e uintptr) int {
	return int(C.gh_event_destroy(l.t, C.uintptr_t(e)))
}

func (l *cudartLib) eventElapsed(start, end uintptr) (float32, int) {
	var ms C.float
	code := C.gh_event_elapsed(l.t, &ms, C.uintptr_t(start), C.uintptr_t(end))
	return float32(ms), int(code)
}

func (l *cudartLib) deviceSync(dev int) int { return int(C.gh_device_sync(l.t, C.int(dev))) }

func (l *cudartLib) memInfo(dev int) (uint64, uint64, int) {
	var fr, tot C.size_t
	code := C.gh_mem_info(l.t, C.int(dev), &fr, &tot)
	return uint64(fr), uint64(tot), int(code)
}

func (l *cudartLib) attribute(dev, attr int) (int, int) {
	var v C.int
	code := C.gh_attribute(l.t, C.int(dev), C.int(attr), &v)
	return int(v), int(code)
}

func (l *cudartLib) pciBusID(dev int) (string, int) {
	var buf [64]C.char
	code := C.gh_pci_bus_id(l.t, C.int(dev), &buf[0], C.int(len(buf)))
	if code != 0 {
		return "", int(code)
	}
	return C.GoString(&buf[0]), 0
}

// ncclLib calls NCCL through a resolved symbol table; ct is the CUDA
// runtime's table, for making a device current.
type ncclLib struct{ t, ct *unsafe.Pointer }

func newNCCLAPI(rt cudartAPI, syms []uintptr) ncclAPI {
	l := &ncclLib{t: table(syms)}
	if c, ok := rt.(*cudartLib); ok {
		l.ct = c.t
	}
	return l
}

func (l *ncclLib) version() (int, int) {
	var v C.int
	code := C.gh_nccl_version(l.t, &v)
	return int(v), int(code)
}

func (l *ncclLib) uniqueID() (UniqueID, int) {
	var id UniqueID
	code := C.gh_nccl_unique_id(l.t, unsafe.Pointer(&id[0]))
	return id, int(code)
}

func (l *ncclLib) commInitRank(dev, nranks int, id UniqueID, rank int) (uintptr, int, int) {
	var c C.uintptr_t
	code := int(C.gh_nccl_init(l.ct, l.t, C.int(dev), &c, C.int(nranks), unsafe.Pointer(&id[0]), C.int(rank)))
	if code < 0 {
		return 0, -code, 0
	}
	return uintptr(c), 0, code
}

func (l *ncclLib) commDestroy(c uintptr) int { return int(C.gh_nccl_comm_destroy(l.t, C.uintptr_t(c))) }
func (l *ncclLib) commAbort(c uintptr) int   { return int(C.gh_nccl_comm_abort(l.t, C.uintptr_t(c))) }

func (l *ncclLib) commQuery(q commQuery, c uintptr) (int, int) {
	var v C.int
	code := C.gh_nccl_comm_int(l.t, C.int(q), C.uintptr_t(c), &v)
	return int(v), int(code)
}

func (l *ncclLib) errorString(code int) string {
	return C.GoString(C.gh_nccl_error_string(l.t, C.int(code)))
}

func (l *ncclLib) lastError(c uintptr) string {
	return C.GoString(C.gh_nccl_last_error(l.t, C.uintptr_t(c)))
}

func (l *ncclLib) allReduce(send, recv uintptr, count int, dt, op int, c, s uintptr) int {
	return int(C.gh_nccl_all_reduce(l.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), C.uintptr_t(c), C.uintptr_t(s)))
}

func (l *ncclLib) broadcast(send, recv uintptr, count int, dt, root int, c, s uintptr) int {
	return int(C.gh_nccl_broadcast(l.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(root), C.uintptr_t(c), C.uintptr_t(s)))
}

func (l *ncclLib) reduce(send, recv uintptr, count int, dt, op, root int, c, s uintptr) int {
	return int(C.gh_nccl_reduce(l.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), C.int(root), C.uintptr_t(c), C.uintptr_t(s)))
}

func (l *ncclLib) allGather(send, recv uintptr, count int, dt int, c, s uintptr) int {
	return int(C.gh_nccl_all_gather(l.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.uintptr_t(c), C.uintptr_t(s)))
}

func (l *ncclLib) reduceScatter(send, recv uintptr, count int, dt, op int, c, s uintptr) int {
	return int(C.gh_nccl_reduce_scatter(l.t, C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), C.uintptr_t(c), C.uintptr_t(s)))
}

func (l *ncclLib) send(buf uintptr, count int, dt, peer int, c, s uintptr) int {
	return int(C.gh_nccl_send(l.t, C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), C.uintptr_t(c), C.uintptr_t(s)))
}

func (l *ncclLib) recv(buf uintptr, count int, dt, peer int, c, s uintptr) int {
	return int(C.gh_nccl_recv(l.t, C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), C.uintptr_t(c), C.uintptr_t(s)))
}

func (l *ncclLib) groupStart() int { return int(C.gh_nccl_group_start(l.t)) }
func (l *ncclLib) groupEnd() int   { return int(C.gh_nccl_group_end(l.t)) }
