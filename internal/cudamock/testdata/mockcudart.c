// A stand-in for libcudart, built by the tests (internal/cudamock: with
// gcc when there is one, else a prebuilt copy), so that the dlopen shim and
// its C calls are exercised on machines without a GPU.
// "Device memory" is calloc'd host memory recorded with the device that was
// current when it was allocated; like the real runtime, the current device is per
// thread, and every call that touches device memory checks that the
// caller made the right device current on this thread.
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NDEV 2
// The version the mock reports, and which cudaMemcpyBatchAsync it has:
// MOCK_BATCH=12 the CUDA 12.8 signature (with failIdx), MOCK_BATCH=13 the
// CUDA 13.0 one (without); none before 12.8. The tests build each variant.
#ifndef MOCK_VERSION
#define MOCK_VERSION 12040
#endif

// Counters the tests read with mockCounts: cudaMemcpyAsync calls,
// cudaMemcpyBatchAsync calls, copies in those batches, cudaStreamWaitEvent
// calls, streams created.
static long counts[5];
void mockCounts(long *out) { memcpy(out, counts, sizeof counts); }

// mockSource returns the SHA-256 of this file (and of mocknccl.c) the
// library was built from, so that a test can tell a stale prebuilt copy.
#ifndef MOCK_SOURCE
#define MOCK_SOURCE "unstamped"
#endif
const char *mockSource(void) { return MOCK_SOURCE; }

// mockFailCopy makes the nth cudaMemcpyAsync from now (1: the next one) of
// direction kind (1 host to device, 2 device to host, 3 device to device;
// 0 any) fail with code, once; nth 0 disarms it.
static pthread_mutex_t failMu = PTHREAD_MUTEX_INITIALIZER;
static long failIn;
static int failKind, failCode;
void mockFailCopy(int kind, long nth, int code) {
	pthread_mutex_lock(&failMu);
	failKind = kind; failIn = nth; failCode = code;
	pthread_mutex_unlock(&failMu);
}
static int injected(int kind) {
	int code = 0;
	pthread_mutex_lock(&failMu);
	if (failIn > 0 && (failKind == 0 || failKind == kind) && --failIn == 0) code = failCode;
	pthread_mutex_unlock(&failMu);
	return code;
}
// The current device is per thread, as in CUDA. Stricter than CUDA, every
// call that uses it also forgets it, as if the next call might come from
// another thread (a goroutine may move): so the package must make the
// device current in the same C call, every time.
static __thread int cur = -1;
static int take(void) { int d = cur; cur = -1; return d; }

int cudaGetDeviceCount(int *n) { *n = NDEV; return 0; }
int cudaSetDevice(int d) { if (d < 0 || d >= NDEV) return 101; cur = d; return 0; }
int cudaRuntimeGetVersion(int *v) { *v = MOCK_VERSION; return 0; }
int cudaDriverGetVersion(int *v) { *v = 12060; return 0; }
const char *cudaGetErrorString(int e) {
	switch (e) {
	case 0: return "no error";
	case 1: return "invalid argument";
	case 2: return "out of memory";
	case 101: return "invalid device ordinal";
	case 700: return "an illegal memory access was encountered";
	case 801: return "operation not supported";
	case 600: return "device not ready";
	case 900: return "mock: wrong current device";
	}
	return "unknown error";
}
const char *cudaGetErrorName(int e) {
	switch (e) {
	case 0: return "cudaSuccess";
	case 1: return "cudaErrorInvalidValue";
	case 2: return "cudaErrorMemoryAllocation";
	case 101: return "cudaErrorInvalidDevice";
	case 700: return "cudaErrorIllegalAddress";
	case 801: return "cudaErrorNotSupported";
	case 600: return "cudaErrorNotReady";
	case 900: return "cudaErrorMockWrongDevice";
	}
	return "cudaErrorUnknown";
}

// Allocations are recorded so that an address inside one can be checked.
// The table is shared by every thread (several ranks run as goroutines in
// one process), so it is guarded, as the real runtime is thread-safe.
#define MAXA 4096
static struct { char *base; size_t n; int dev; } allocs[MAXA];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int find(const void *p, size_t n) {
	int d = -1;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXA; i++)
		if (allocs[i].base && (const char *)p >= allocs[i].base && (const char *)p + n <= allocs[i].base + allocs[i].n) {
			d = allocs[i].dev;
			break;
		}
	pthread_mutex_unlock(&mu);
	return d;
}

int cudaMalloc(void **p, size_t n) {
	int cur = take();
	if (cur < 0) return 900;
	if (n > ((size_t)1 << 40)) return 2;
	size_t r = (n + 255) & ~(size_t)255; // cudaMalloc aligns to 256 bytes
	char *b = aligned_alloc(256, r ? r : 256);
	if (!b) return 2;
	memset(b, 0, r);
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXA; i++) {
		if (!allocs[i].base) {
			allocs[i].base = b;
			allocs[i].n = n;
			allocs[i].dev = cur;
			pthread_mutex_unlock(&mu);
			*p = b;
			return 0;
		}
	}
	pthread_mutex_unlock(&mu);
	free(b);
	return 2;
}

int cudaFree(void *p) {
	int cur = take();
	if (!p) return 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXA; i++) {
		if (allocs[i].base == p) {
			if (allocs[i].dev != cur) {
				pthread_mutex_unlock(&mu);
				return 900;
			}
			allocs[i].base = NULL;
			pthread_mutex_unlock(&mu);
			free(p);
			return 0;
		}
	}
	pthread_mutex_unlock(&mu);
	return 1;
}

int cudaMallocHost(void **p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
int cudaFreeHost(void *p) { free(p); return 0; }

static int check(void *dst, const void *src, size_t n, int kind) {
	int cur = take();
	if (kind == 1 || kind == 3) { int d = find(dst, n); if (d < 0) return 1; if (d != cur) return 900; }
	if (kind == 2 || kind == 3) { int d = find(src, n); if (d < 0) return 1; if (d != cur) return 900; }
	return 0;
}

int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
	int e = check(dst, src, n, kind);
	if (e) return e;
	memmove(dst, src, n);
	return 0;
}

// Streams are recorded, so that a call can check that it was handed one.
#define MAXS 256
static void *streams[MAXS];
static int known(void *s) {
	int ok = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXS && !ok; i++) ok = s && streams[i] == s;
	pthread_mutex_unlock(&mu);
	return ok;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
	if (!known(stream)) return 1; // the package always passes its own stream
	__sync_fetch_and_add(&counts[0], 1);
	int e = injected(kind);
	if (e) { take(); return e; }
	return cudaMemcpy(dst, src, n, kind);
}

#ifdef MOCK_BATCH
// cudaMemcpyAttributes.
typedef struct { int srcAccessOrder, srcType, srcId, dstType, dstId; unsigned flags; } attrs_t;

// mockRefuseBatch makes every cudaMemcpyBatchAsync fail with code (0: work
// again), as a runtime whose driver is too old for it does.
static int refuseBatch;
void mockRefuseBatch(int code) { __sync_lock_test_and_set(&refuseBatch, code); }

static int batch(void **dsts, void **srcs, size_t *sizes, size_t count, attrs_t *attrs, size_t *idxs,
	size_t nattrs, size_t *failIdx, void *stream) {
	int cur = take();
	if (failIdx) *failIdx = (size_t)-1;
	if (cur < 0) return 900;
	if (refuseBatch) return refuseBatch;
	if (!known(stream) || count == 0 || !attrs || !idxs || nattrs == 0 || idxs[0] != 0) return 1;
	for (size_t a = 0; a < nattrs; a++)
		if (attrs[a].srcAccessOrder < 1 || attrs[a].srcAccessOrder > 3) return 1;
	for (size_t i = 0; i < count; i++) {
		int d = find(dsts[i], sizes[i]), e = find(srcs[i], sizes[i]);
		if (d < 0 || e < 0 || d != cur || e != cur) {
			if (failIdx) *failIdx = i;
			return d < 0 || e < 0 ? 1 : 900;
		}
	}
	for (size_t i = 0; i < count; i++) memmove(dsts[i], srcs[i], sizes[i]);
	__sync_fetch_and_add(&counts[1], 1);
	__sync_fetch_and_add(&counts[2], (long)count);
	return 0;
}

#if MOCK_BATCH == 12
int cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count, attrs_t *attrs, size_t *idxs,
	size_t nattrs, size_t *failIdx, void *stream) {
	if (!failIdx) { take(); return 1; }
	return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, failIdx, stream);
}
#else
int cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count, attrs_t *attrs, size_t *idxs,
	size_t nattrs, void *stream) {
	return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, stream);
}
#endif
#endif

int cudaMemset(void *dst, int v, size_t n) {
	int cur = take();
	int d = find(dst, n);
	if (d < 0) return 1;
	if (d != cur) return 900;
	memset(dst, v, n);
	return 0;
}

int cudaMemsetAsync(void *dst, int v, size_t n, void *stream) { return cudaMemset(dst, v, n); }

int cudaStreamCreateWithFlags(void **s, unsigned flags) {
	if (take() < 0) return 900;
	if (flags != 1) return 1;
	*s = malloc(16);
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXS; i++)
		if (!streams[i]) { streams[i] = *s; break; }
	pthread_mutex_unlock(&mu);
	__sync_fetch_and_add(&counts[4], 1);
	return 0;
}
int cudaStreamSynchronize(void *s) { take(); return known(s) ? 0 : 1; }
int cudaStreamDestroy(void *s) {
	take();
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXS; i++)
		if (streams[i] == s) streams[i] = NULL;
	pthread_mutex_unlock(&mu);
	free(s);
	return 0;
}
int cudaStreamWaitEvent(void *s, void *e, unsigned flags) {
	take();
	if (!known(s) || !e || flags != 0) return 1;
	__sync_fetch_and_add(&counts[3], 1);
	return 0;
}
int cudaEventCreateWithFlags(void **e, unsigned flags) { *e = calloc(1, 16); return 0; }
int cudaEventRecord(void *e, void *s) { ((int *)e)[0]++; return 0; }
int cudaEventSynchronize(void *e) { return 0; }
int cudaEventQuery(void *e) { return ((int *)e)[0] > 0 ? 0 : 600; }
int cudaEventElapsedTime(float *ms, void *a, void *b) { *ms = 1.5f; return 0; }
int cudaEventDestroy(void *e) { free(e); return 0; }
int cudaDeviceSynchronize(void) { return take() < 0 ? 900 : 0; }
int cudaMemGetInfo(size_t *f, size_t *t) { *f = (size_t)70 << 30; *t = (size_t)80 << 30; return 0; }
int cudaDeviceGetAttribute(int *v, int attr, int dev) {
	if (dev < 0 || dev >= NDEV) return 101;
	switch (attr) {
	case 16: *v = 132; return 0;
	case 75: *v = 9; return 0;
	case 76: *v = 0; return 0;
	}
	return 1;
}
int cudaDeviceGetPCIBusId(char *buf, int n, int dev) {
	if (dev < 0 || dev >= NDEV) return 101;
	buf[0] = 0;
	strncpy(buf, dev == 0 ? "0000:19:00.0" : "0000:3b:00.0", n - 1);
	return 0;
}
