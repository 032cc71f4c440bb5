// A stand-in for the CUDA driver library (libcuda.so.1), built by the tests
// (internal/cudamock: with gcc), for the one thing the cuda package asks
// of the driver: loading and launching its copy kernels (copykernel.ptx).
// The mock "runs" a launch on the host: device memory is host memory in
// the mock runtime, so each copy of the walk is a memmove, and each block
// of the pieces kernel moves its piece as the PTX does (binary search for
// its copy, 64 KiB pieces), after checking that the grid is exactly the
// launch's pieces.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// Counters the tests read with mockDriverCounts: modules loaded, launches,
// copies launched, modules unloaded, launches of the pieces kernel,
// launches of the walk.
static long counts[6];
void mockDriverCounts(long *out) { memcpy(out, counts, sizeof counts); }

// mockFailLaunch makes every cuLaunchKernel fail with code (0: work again).
static int failLaunch;
void mockFailLaunch(int code) { __sync_lock_test_and_set(&failLaunch, code); }

// mockBreakKernel makes the kernels in mask (1: pieces, 2: walk) copy
// wrongly, leaving each copy's last byte out, as a kernel miscompiled
// for a device might (0: right again).
static int broken;
void mockBreakKernel(int mask) { __sync_lock_test_and_set(&broken, mask); }

static int module, walk, pieces; // their addresses are the handles

int cuGetErrorString(int code, const char **s) {
	switch (code) {
	case 1: *s = "invalid argument"; return 0;
	case 218: *s = "a PTX JIT compilation failed"; return 0;
	case 400: *s = "invalid resource handle"; return 0;
	case 500: *s = "named symbol not found"; return 0;
	}
	*s = "unknown error";
	return 0;
}

// cuModuleLoadDataEx accepts PTX that declares the copy kernel with its
// two parameters; otherwise it fails as the JIT does, with a log.
int cuModuleLoadDataEx(void **m, const void *image, unsigned n, const int *opts, void **vals) {
	const char *ptx = image;
	char *log = NULL;
	size_t logSize = 0;
	for (unsigned i = 0; i < n; i++) {
		if (opts[i] == 5) log = vals[i];
		if (opts[i] == 6) logSize = (size_t)vals[i];
	}
	if (!strstr(ptx, ".entry gohorovod_copy_batch(") || !strstr(ptx, ".param .align 8 .b8 gohorovod_copy_batch_args[3072]") ||
	    !strstr(ptx, ".entry gohorovod_copy_pieces(") || !strstr(ptx, ".param .align 8 .b8 gohorovod_copy_pieces_args[3584]")) {
		if (log && logSize)
			snprintf(log, logSize, "mock: no gohorovod_copy_batch(count, args[3072]) and gohorovod_copy_pieces(count, args[3584]) in the PTX");
		return 218;
	}
	*m = &module;
	__sync_fetch_and_add(&counts[0], 1);
	return 0;
}

int cuModuleGetFunction(void **f, void *m, const char *name) {
	if (m != &module) return 400;
	if (strcmp(name, "gohorovod_copy_batch") == 0) *f = &walk;
	else if (strcmp(name, "gohorovod_copy_pieces") == 0) *f = &pieces;
	else return 500;
	return 0;
}

int cuModuleUnload(void *m) {
	if (m != &module) return 400;
	__sync_fetch_and_add(&counts[3], 1);
	return 0;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
	unsigned shared, void *stream, void **params, void **extra) {
	if (failLaunch) return failLaunch;
	if ((f != &walk && f != &pieces) || !params || extra || gx == 0 || gy != 1 || gz != 1 || bx == 0 || by != 1 || bz != 1 || shared)
		return 1;
	uint32_t count = *(uint32_t *)params[0];
	const uint64_t *args = params[1];
	const uint64_t *dsts = args, *srcs = args + 128, *sizes = args + 256;
	const uint32_t *firsts = (const uint32_t *)(args + 384);
	if (count == 0 || count > 128) return 1;
	for (uint32_t i = 0; i < count; i++)
		if (sizes[i] == 0) return 1; // the package leaves empty copies out
	int cut = 0;
	if (f == &walk) {
		cut = (broken & 2) != 0;
		for (uint32_t i = 0; i < count; i++)
			memmove((void *)(uintptr_t)dsts[i], (const void *)(uintptr_t)srcs[i], (size_t)sizes[i] - cut);
		__sync_fetch_and_add(&counts[5], 1);
	} else {
		// The grid must be the launch's pieces, numbered copy after copy.
		uint64_t total = 0;
		for (uint32_t i = 0; i < count; i++) {
			if (firsts[i] != total) return 1;
			total += (sizes[i] + 65535) >> 16;
		}
		if (total != gx) return 1;
		cut = (broken & 1) != 0;
		for (uint32_t b = 0; b < gx; b++) {
			uint32_t lo = 0, hi = count;
			while (lo + 1 < hi) {
				uint32_t mid = (lo + hi) / 2;
				if (firsts[mid] <= b) lo = mid;
				else hi = mid;
			}
			uint64_t off = (uint64_t)(b - firsts[lo]) << 16, end = off + 65536;
			if (end >= sizes[lo]) end = sizes[lo] - cut; // the copy's last piece
			if (off < end)
				memmove((char *)(uintptr_t)dsts[lo] + off, (const char *)(uintptr_t)srcs[lo] + off, (size_t)(end - off));
		}
		__sync_fetch_and_add(&counts[4], 1);
	}
	__sync_fetch_and_add(&counts[1], 1);
	__sync_fetch_and_add(&counts[2], (long)count);
	return 0;
}
