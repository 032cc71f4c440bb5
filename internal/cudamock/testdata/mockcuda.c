// A stand-in for the CUDA driver library (libcuda.so.1), built by the tests
// (internal/cudamock: with gcc), for the one thing the cuda package asks
// of the driver: loading and launching its copy kernel (copykernel.ptx).
// The mock "runs" a launch on the host: device memory is host memory in
// the mock runtime, so each copy of the launch is a memmove.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// Counters the tests read with mockDriverCounts: modules loaded, launches,
// copies launched, modules unloaded.
static long counts[4];
void mockDriverCounts(long *out) { memcpy(out, counts, sizeof counts); }

// mockFailLaunch makes every cuLaunchKernel fail with code (0: work again).
static int failLaunch;
void mockFailLaunch(int code) { __sync_lock_test_and_set(&failLaunch, code); }

static int module, function; // their addresses are the handles

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
	if (!strstr(ptx, ".entry gohorovod_copy_batch(") || !strstr(ptx, ".param .align 8 .b8 gohorovod_copy_batch_args[3072]")) {
		if (log && logSize) snprintf(log, logSize, "mock: no gohorovod_copy_batch(count, args[3072]) in the PTX");
		return 218;
	}
	*m = &module;
	__sync_fetch_and_add(&counts[0], 1);
	return 0;
}

int cuModuleGetFunction(void **f, void *m, const char *name) {
	if (m != &module) return 400;
	if (strcmp(name, "gohorovod_copy_batch") != 0) return 500;
	*f = &function;
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
	if (f != &function || !params || extra || gx == 0 || gy != 1 || gz != 1 || bx == 0 || by != 1 || bz != 1 || shared)
		return 1;
	uint32_t count = *(uint32_t *)params[0];
	const uint64_t *args = params[1];
	if (count == 0 || count > 128) return 1;
	for (uint32_t i = 0; i < count; i++) {
		if (args[256 + i] == 0) return 1; // the package leaves empty copies out
		memmove((void *)(uintptr_t)args[i], (const void *)(uintptr_t)args[128 + i], (size_t)args[256 + i]);
	}
	__sync_fetch_and_add(&counts[1], 1);
	__sync_fetch_and_add(&counts[2], (long)count);
	return 0;
}
