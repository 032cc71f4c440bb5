//go:build mpi && cgo

package mpi

/*
#include <mpi.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

// Element type codes: the values of tensor.DType (checked by a test).
enum { HV_F32 = 1, HV_F64, HV_F16, HV_BF16, HV_I8, HV_U8, HV_I32, HV_I64, HV_U64, HV_I16, HV_U16, HV_BOOL };
// Reduction codes: the values of tensor.ReduceOp.
enum { HV_SUM = 0, HV_MIN, HV_MAX, HV_PROD, HV_BAND, HV_BOR };

static char hv_dummy[8];
#define HV_NZ(p) ((p) ? (p) : (void *)hv_dummy)

// ---- half precision, combined in float32, rounded to nearest even ----

static inline float hv_bits_f32(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline uint32_t hv_f32_bits(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

static inline float hv_f16_to_f32(uint16_t h) {
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	if (exp == 0) {
		float f = (float)mant * 5.9604644775390625e-8f; // mant * 2^-24, exact
		return hv_bits_f32(hv_f32_bits(f) | sign);
	}
	if (exp == 31) return hv_bits_f32(sign | 0x7f800000u | (mant << 13));
	return hv_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t hv_f32_to_f16(float f) {
	uint32_t x = hv_f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t ax = x & 0x7fffffffu;
	if (ax > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff); // quiet NaN
	if (ax >= 0x47800000u) return sign | 0x7c00;                                 // >= 65536: inf
	if (ax < 0x38800000u) {                                                      // below 2^-14
		if (ax <= 0x33000000u) return sign;                                      // <= 2^-25: 0
		uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
		uint32_t shift = 126 - e;
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1))) r++;
		return sign | (uint16_t)r;
	}
	uint32_t h = (ax >> 13) - (112u << 10), rem = ax & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; // a carry into the exponent is right, up to inf
	return sign | (uint16_t)h;
}

static inline float hv_bf16_to_f32(uint16_t h) { return hv_bits_f32((uint32_t)h << 16); }

static inline uint16_t hv_f32_to_bf16(float f) {
	uint32_t b = hv_f32_bits(f);
	if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(b >> 16) | 0x40;
	b += 0x7fff + ((b >> 16) & 1);
	return (uint16_t)(b >> 16);
}

// min and max propagate NaN from either side and order -0 below +0, like
// Go's builtin min and max (and so tensor.Reduce).
static inline float hv_fmin(float a, float b) {
	if (a != a) return a;
	if (b != b) return b;
	if (a == b) return (hv_f32_bits(a) >> 31) ? a : b;
	return b < a ? b : a;
}
static inline float hv_fmax(float a, float b) {
	if (a != a) return a;
	if (b != b) return b;
	if (a == b) return (hv_f32_bits(a) >> 31) ? b : a;
	return b > a ? b : a;
}

#define HV_HALF_OP(name, TO, FROM, EXPR)                                                 \
	static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {               \
		const uint16_t *s = (const uint16_t *)in;                                        \
		uint16_t *d = (uint16_t *)inout;                                                 \
		int n = *len;                                                                    \
		(void)dt;                                                                        \
		for (int i = 0; i < n; i++) {                                                    \
			float a = TO(d[i]), b = TO(s[i]);                                            \
			d[i] = FROM(EXPR);                                                           \
		}                                                                                \
	}

HV_HALF_OP(hv_f16_sum, hv_f16_to_f32, hv_f32_to_f16, a + b)
HV_HALF_OP(hv_f16_prod, hv_f16_to_f32, hv_f32_to_f16, a * b)
HV_HALF_OP(hv_f16_min, hv_f16_to_f32, hv_f32_to_f16, hv_fmin(a, b))
HV_HALF_OP(hv_f16_max, hv_f16_to_f32, hv_f32_to_f16, hv_fmax(a, b))
HV_HALF_OP(hv_bf16_sum, hv_bf16_to_f32, hv_f32_to_bf16, a + b)
HV_HALF_OP(hv_bf16_prod, hv_bf16_to_f32, hv_f32_to_bf16, a * b)
HV_HALF_OP(hv_bf16_min, hv_bf16_to_f32, hv_f32_to_bf16, hv_fmin(a, b))
HV_HALF_OP(hv_bf16_max, hv_bf16_to_f32, hv_f32_to_bf16, hv_fmax(a, b))

static MPI_Datatype hv_half_type[2];
static MPI_Op hv_half_op[2][4]; // [f16, bf16][sum, min, max, prod]
static int hv_ready;

// hv_setup creates the half-precision types and operations. It returns an
// MPI return code and names the failing call in *call.
static int hv_setup(const char **call) {
	if (hv_ready) return MPI_SUCCESS;
	int rc;
	MPI_User_function *fns[2][4] = {
		{hv_f16_sum, hv_f16_min, hv_f16_max, hv_f16_prod},
		{hv_bf16_sum, hv_bf16_min, hv_bf16_max, hv_bf16_prod},
	};
	for (int t = 0; t < 2; t++) {
		*call = "MPI_Type_contiguous";
		if ((rc = MPI_Type_contiguous(2, MPI_BYTE, &hv_half_type[t])) != MPI_SUCCESS) return rc;
		*call = "MPI_Type_commit";
		if ((rc = MPI_Type_commit(&hv_half_type[t])) != MPI_SUCCESS) return rc;
		for (int o = 0; o < 4; o++) {
			*call = "MPI_Op_create";
			if ((rc = MPI_Op_create(fns[t][o], 1, &hv_half_op[t][o])) != MPI_SUCCESS) return rc;
		}
	}
	hv_ready = 1;
	return MPI_SUCCESS;
}

static void hv_teardown(void) {
	if (!hv_ready) return;
	for (int t = 0; t < 2; t++) {
		for (int o = 0; o < 4; o++) MPI_Op_free(&hv_half_op[t][o]);
		MPI_Type_free(&hv_half_type[t]);
	}
	hv_ready = 0;
}

static MPI_Datatype hv_dtype(int code) {
	switch (code) {
	case HV_F32: return MPI_FLOAT;
	case HV_F64: return MPI_DOUBLE;
	case HV_F16: return hv_half_type[0];
	case HV_BF16: return hv_half_type[1];
	case HV_I8: return MPI_INT8_T;
	case HV_U8: return MPI_UINT8_T;
	case HV_I32: return MPI_INT32_T;
	case HV_I64: return MPI_INT64_T;
	case HV_U64: return MPI_UINT64_T;
	case HV_I16: return MPI_INT16_T;
	case HV_U16: return MPI_UINT16_T;
	// bool travels as bytes: MPI_C_BOOL has only the logical operations,
	// and tensor.Bool's "or" and "and" are the byte maximum and minimum.
	case HV_BOOL: return MPI_UINT8_T;
	}
	return MPI_DATATYPE_NULL;
}

static MPI_Op hv_op(int dt, int op) {
	if (dt == HV_F16 || dt == HV_BF16) {
		if (op < HV_SUM || op > HV_PROD) return MPI_OP_NULL;
		return hv_half_op[dt == HV_BF16][op];
	}
	if (dt == HV_BOOL) { // as tensor.BoolOp: sum is "or", product is "and"
		if (op == HV_SUM) op = HV_MAX;
		if (op == HV_PROD) op = HV_MIN;
	}
	switch (op) {
	case HV_SUM: return MPI_SUM;
	case HV_MIN: return MPI_MIN;
	case HV_MAX: return MPI_MAX;
	case HV_PROD: return MPI_PROD;
	case HV_BAND: return MPI_BAND;
	case HV_BOR: return MPI_BOR;
	}
	return MPI_OP_NULL;
}

static int hv_type_size(int code) {
	int n = -1;
	if (MPI_Type_size(hv_dtype(code), &n) != MPI_SUCCESS) return -1;
	return n;
}

// hv_reduce_local applies the operation for (dt, op) to n elements, inout =
// in op inout, as a collective would (for tests of the user functions).
static int hv_reduce_local(void *in, void *inout, int n, int dt, int op) {
	return MPI_Reduce_local(HV_NZ(in), HV_NZ(inout), n, hv_dtype(dt), hv_op(dt, op));
}

static void hv_error(int code, char *buf, int cap, int *cls) {
	char s[MPI_MAX_ERROR_STRING + 1];
	int n = 0;
	if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) n = 0;
	s[n] = 0;
	strncpy(buf, s, cap - 1);
	buf[cap - 1] = 0;
	if (MPI_Error_class(code, cls) != MPI_SUCCESS) *cls = -1;
}

static int hv_initialized(void) { int f = 0; MPI_Initialized(&f); return f; }
static int hv_finalized(void) { int f = 0; MPI_Finalized(&f); return f; }
static int hv_query_thread(void) { int p = -1; MPI_Query_thread(&p); return p; }
static int hv_init_thread(int required, int *provided) {
	return MPI_Init_thread(NULL, NULL, required, provided);
}
static void hv_thread_levels(int *l) {
	l[0] = MPI_THREAD_SINGLE;
	l[1] = MPI_THREAD_FUNNELED;
	l[2] = MPI_THREAD_SERIALIZED;
	l[3] = MPI_THREAD_MULTIPLE;
}

static void hv_library(char *buf, int cap) {
	char s[MPI_MAX_LIBRARY_VERSION_STRING + 1];
	int n = 0;
	if (MPI_Get_library_version(s, &n) != MPI_SUCCESS) n = 0;
	s[n] = 0;
	strncpy(buf, s, cap - 1);
	buf[cap - 1] = 0;
}

static MPI_Comm hv_world(void) { return MPI_COMM_WORLD; }
static int hv_is_null(MPI_Comm c) { return c == MPI_COMM_NULL; }
static int hv_undefined(void) { return MPI_UNDEFINED; }

static int hv_errors_return(MPI_Comm c) { return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN); }
static int hv_errors_return_self(void) { return MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN); }
static int hv_rank(MPI_Comm c, int *r) { return MPI_Comm_rank(c, r); }
static int hv_size(MPI_Comm c, int *s) { return MPI_Comm_size(c, s); }

static int hv_allreduce(void *buf, int n, int dt, int op, MPI_Comm c) {
	return MPI_Allreduce(MPI_IN_PLACE, HV_NZ(buf), n, hv_dtype(dt), hv_op(dt, op), c);
}

// hv_iallreduce starts a nonblocking in-place allreduce; hv_test tests it
// (setting *done) and hv_sleep_ns sleeps without holding a core.
static int hv_iallreduce(void *buf, int n, int dt, int op, MPI_Comm c, MPI_Request *req) {
	return MPI_Iallreduce(MPI_IN_PLACE, HV_NZ(buf), n, hv_dtype(dt), hv_op(dt, op), c, req);
}
static int hv_iallreduce_i64_max(int64_t *buf, int n, MPI_Comm c, MPI_Request *req) {
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_INT64_T, MPI_MAX, c, req);
}
static int hv_test(MPI_Request *req, int *done) { return MPI_Test(req, done, MPI_STATUS_IGNORE); }
// Linux lets a sleep of a normal thread overrun by its timer slack, whose
// default is longer than the patient wait's first sleeps, so that each of
// them would cost a peer waiting on this rank several times its length.
// The first sleep on each thread sets the slack to 1 µs.
static __thread int hv_slack_set;
static void hv_sleep_ns(long ns) {
#ifdef __linux__
	if (!hv_slack_set) {
		prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
		hv_slack_set = 1;
	}
#endif
	struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
	nanosleep(&ts, NULL);
}
// hv_timer_slack returns the calling thread's timer slack in ns (-1: unknown).
static long hv_timer_slack(void) {
#ifdef __linux__
	return (long)prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL);
#else
	return -1;
#endif
}

static int hv_allreduce_i64_max(int64_t *buf, int n, MPI_Comm c) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_INT64_T, MPI_MAX, c);
}

static int hv_alltoall_i64(int64_t *send, int64_t *recv, int n, MPI_Comm c) {
	return MPI_Alltoall(send, n, MPI_INT64_T, recv, n, MPI_INT64_T, c);
}

static int hv_bcast(void *buf, int n, int dt, int root, MPI_Comm c) {
	return MPI_Bcast(HV_NZ(buf), n, hv_dtype(dt), root, c);
}

static int hv_bcast_bytes(void *buf, int n, int root, MPI_Comm c) {
	return MPI_Bcast(HV_NZ(buf), n, MPI_BYTE, root, c);
}

static int hv_allgatherv(void *send, int n, void *recv, int *counts, int *displs, int dt, MPI_Comm c) {
	MPI_Datatype t = hv_dtype(dt);
	return MPI_Allgatherv(HV_NZ(send), n, t, HV_NZ(recv), counts, displs, t, c);
}

static int hv_gatherv(void *send, int n, void *recv, int *counts, int *displs, int dt, int root, MPI_Comm c) {
	MPI_Datatype t = hv_dtype(dt);
	return MPI_Gatherv(HV_NZ(send), n, t, HV_NZ(recv), counts, displs, t, root, c);
}

static int hv_alltoallv(void *send, int *scounts, int *sdispls, void *recv, int *rcounts, int *rdispls, int dt, MPI_Comm c) {
	MPI_Datatype t = hv_dtype(dt);
	return MPI_Alltoallv(HV_NZ(send), scounts, sdispls, t, HV_NZ(recv), rcounts, rdispls, t, c);
}

// hv_sendrecv sends ns elements to dest and receives nr from source (tag
// 0); a peer of -1 is MPI_PROC_NULL: nothing sent, or received.
static int hv_sendrecv(void *send, int ns, int dest, void *recv, int nr, int source, int dt, MPI_Comm c) {
	MPI_Datatype t = hv_dtype(dt);
	return MPI_Sendrecv(HV_NZ(send), ns, t, dest < 0 ? MPI_PROC_NULL : dest, 0,
		HV_NZ(recv), nr, t, source < 0 ? MPI_PROC_NULL : source, 0, c, MPI_STATUS_IGNORE);
}

static int hv_reduce_scatter(void *send, void *recv, int *counts, int dt, int op, MPI_Comm c) {
	return MPI_Reduce_scatter(HV_NZ(send), HV_NZ(recv), counts, hv_dtype(dt), hv_op(dt, op), c);
}

static int hv_barrier(MPI_Comm c) { return MPI_Barrier(c); }

static int hv_split(MPI_Comm c, int color, int key, MPI_Comm *out) {
	return MPI_Comm_split(c, color, key, out);
}

static int hv_split_shared(MPI_Comm c, int key, MPI_Comm *out) {
	return MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, out);
}

static int hv_dup(MPI_Comm c, MPI_Comm *out) { return MPI_Comm_dup(c, out); }
static int hv_free(MPI_Comm *c) { return MPI_Comm_free(c); }
static int hv_finalize(void) { return MPI_Finalize(); }
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	gompi "github.com/sbromberger/gompi"

	"github.com/gohorovod/gohorovod/internal/agree"
	"github.com/gohorovod/gohorovod/tensor"
)

// Built reports whether MPI support is compiled into this binary.
const Built = true

// state is the package's MPI life cycle: Init once, Finalize once.
var state struct {
	sync.Mutex
	up   atomic.Bool // Init succeeded and Finalize has not run (read lock-free by every call)
	done bool        // Finalize ran (or Init refused and finalised)
	// settings are the parameters Init set before MPI_Init (MPISettings).
	settings []Setting
}

// Settings returns the Open MPI parameters that Init set in this process's
// environment before MPI_Init, where the user had not (MPISettings).
func Settings() []Setting {
	state.Lock()
	defer state.Unlock()
	return append([]Setting(nil), state.settings...)
}

// Init initialises MPI with MPI_THREAD_MULTIPLE (MPI_Init_thread), unless
// the process already did, sets MPI_ERRORS_RETURN on the world and self
// communicators, and creates the half-precision types and operations.
//
// It refuses with an error, and never ends the process, when MPI provides
// a lower thread-support level than MPI_THREAD_MULTIPLE (finalising MPI
// again if Init initialised it; see checkThreadLevel for the message), and
// when the launcher announced more ranks than MPI reports (see CheckLaunch;
// MPI is finalised again). Calling Init again after success is a no-op;
// calling it after Finalize or a refusal that finalised MPI returns
// ErrFinalized.
func Init() error {
	state.Lock()
	defer state.Unlock()
	if state.up.Load() {
		return nil
	}
	if state.done || C.hv_finalized() != 0 {
		return ErrFinalized
	}
	if C.hv_initialized() == 0 {
		// Refuse before MPI_Init_thread, which would end the process
		// with Open MPI's own text (see CheckSrun).
		if err := CheckSrun(os.Getenv, Library); err != nil {
			return err
		}
		state.settings = applySettings()
		// Not gompi.Start: it ends the process (log.Fatalf) when MPI
		// refuses MPI_THREAD_MULTIPLE. Start sets up nothing else (gompi's
		// world communicator is the constant MPI_COMM_WORLD), so gompi's
		// WorldSize, WorldTime and Stop work on MPI initialised here.
		provided, err := initThread(threadMultiple)
		if err != nil {
			if C.hv_initialized() != 0 {
				C.hv_finalize()
				state.done = true
			}
			return err
		}
		if err := checkThreadLevel(provided, true); err != nil {
			C.hv_finalize()
			state.done = true
			return err
		}
	} else if err := checkThreadLevel(int(C.hv_query_thread()), false); err != nil {
		return err
	}
	if rc := C.hv_errors_return_self(); rc != 0 {
		return newError("MPI_Comm_set_errhandler", rc)
	}
	if rc := C.hv_errors_return(C.hv_world()); rc != 0 {
		return newError("MPI_Comm_set_errhandler", rc)
	}
	if err := CheckLaunch(DetectLaunch(os.Getenv), true, Library, gompi.WorldSize()); err != nil {
		C.hv_finalize()
		state.done = true
		return err
	}
	var call *C.char
	if rc := C.hv_setup(&call); rc != 0 {
		return newError(C.GoString(call), rc)
	}
	state.up.Store(true)
	return nil
}

// initThread initialises MPI (MPI_Init_thread), asking for the
// thread-support level required, and returns the level MPI provides. Tests
// replace it to make MPI refuse MPI_THREAD_MULTIPLE.
var initThread = mpiInitThread

func mpiInitThread(required int) (provided int, err error) {
	var p C.int
	if rc := C.hv_init_thread(C.int(required), &p); rc != 0 {
		return 0, newError("MPI_Init_thread", rc)
	}
	return int(p), nil
}

// Initialized reports whether Init has succeeded and Finalize has not run.
func Initialized() bool { return state.up.Load() }

// Finalize frees the half-precision types and operations and finalises MPI
// (gompi.Stop). Every rank must call it, after freeing the communicators it
// split or duplicated. It is a no-op when MPI is not running.
func Finalize() error {
	state.Lock()
	defer state.Unlock()
	if !state.up.Load() {
		return nil
	}
	C.hv_teardown()
	state.up.Store(false)
	state.done = true
	gompi.Stop()
	return nil
}

// Time returns MPI_Wtime, seconds since an arbitrary point in the past.
func Time() float64 { return gompi.WorldTime() }

// LibraryVersion returns MPI_Get_library_version's text (it needs no Init).
func LibraryVersion() string {
	buf := make([]byte, 8192)
	C.hv_library((*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	return unpackC(buf)
}

func unpackC(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func newError(call string, rc C.int) error {
	buf := make([]byte, 1024)
	var cls C.int
	C.hv_error(rc, (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)), &cls)
	return &Error{Call: call, Code: int(rc), Class: int(cls), Text: unpackC(buf)}
}

// Comm is an MPI communicator. Its collectives are called by every rank of
// the group, in the same order. A Comm is used by one goroutine at a time.
type Comm struct {
	h     C.MPI_Comm
	rank  int
	size  int
	world bool
	freed bool
	noChk bool  // agreement check off
	limit int   // largest element count of one MPI call (maxCount; tests lower it)
	bell  *bell // the node's doorbell for patient waits (EnableDoorbell); nil: none
}

// World returns the world communicator (MPI_COMM_WORLD). Freeing it only
// retires this handle; MPI keeps the world until Finalize.
func World() (*Comm, error) {
	if !Initialized() {
		return nil, ErrNotInitialized
	}
	return wrap(C.hv_world(), true)
}

func wrap(h C.MPI_Comm, world bool) (*Comm, error) {
	c := &Comm{h: h, world: world, limit: maxCount}
	if rc := C.hv_errors_return(h); rc != 0 {
		return nil, newError("MPI_Comm_set_errhandler", rc)
	}
	var r, s C.int
	if rc := C.hv_rank(h, &r); rc != 0 {
		return nil, newError("MPI_Comm_rank", rc)
	}
	if rc := C.hv_size(h, &s); rc != 0 {
		return nil, newError("MPI_Comm_size", rc)
	}
	c.rank, c.size = int(r), int(s)
	return c, nil
}

// Rank is this process's index in the group.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks in the group.
func (c *Comm) Size() int { return c.size }

// SetCheck turns the agreement check of the collectives on (the default) or
// off. Every rank must make the same choice. With the check off, arguments
// that disagree across ranks are the MPI library's undefined behaviour, and
// a rank that finds its own arguments invalid returns at once, leaving the
// others waiting in the collective.
func (c *Comm) SetCheck(on bool) { c.noChk = !on }

// Check reports whether the agreement check is on.
func (c *Comm) Check() bool { return !c.noChk }

func (c *Comm) usable() error {
	if c == nil || c.freed {
		return ErrFreed
	}
	if !Initialized() {
		return ErrNotInitialized
	}
	yieldSlice()
	return nil
}

// start begins a collective with arguments a: c must be usable, a pass
// this rank's checks (check) and the ranks agree (agree).
func (c *Comm) start(a agree.Args) error {
	if err := c.usable(); err != nil {
		return err
	}
	return c.agree(&a, c.check(&a))
}

// agree runs the agreement check (when on) of a call whose arguments
// this rank checked (a, with its own error local): see agreeAll.
func (c *Comm) agree(a *agree.Args, local error) error {
	return c.agreeWaiting(a, local, Patience{})
}

// agreeWaiting is agree, its allreduce waiting as p says (Max 0: the
// blocking call).
func (c *Comm) agreeWaiting(a *agree.Args, local error, p Patience) error {
	op := a.Kind.String()
	if c.noChk {
		if local != nil {
			return &ArgError{Op: op, Rank: c.rank, Msg: local.Error()}
		}
		return nil
	}
	return c.agreeAll(op, a.Call(), local, false, p)
}

// agreeAll is agreeWaiting whether the check is on or off: one allreduce
// of the fields of call (and of this rank's findings: its own error, or
// that the ranks disagree), and every rank returns the same error. When
// the ranks disagree, they gather each other's calls and say how in
// agree.Disagreement's words; when a rank found its own arguments wrong,
// the lowest such rank broadcasts its error.
func (c *Comm) agreeAll(op string, call agree.Call, local error, disagrees bool, p Patience) error {
	fs := fields(call, c.size)
	vec := agreementVector(fs, local != nil, disagrees, c.rank, c.size)
	if err := c.allreduceMax(vec, p); err != nil {
		return err
	}
	disagree, bad := verdict(len(fs), vec, c.size)
	if disagree {
		all, err := c.allgatherInts(call.Vector(c.size))
		if err != nil {
			return err
		}
		return disagreement(op, call.Kind, all, c.size)
	}
	if bad < 0 {
		return nil
	}
	var msg []byte
	if bad == c.rank {
		msg = packMsg(local)
	} else {
		msg = make([]byte, msgLen)
	}
	if rc := C.hv_bcast_bytes(unsafe.Pointer(&msg[0]), C.int(msgLen), C.int(bad), c.h); rc != 0 {
		return newError("MPI_Bcast", rc)
	}
	return unpackMsg(op, bad, msg)
}

// allreduceMax reduces vec in place with MAX across c, waiting as p says.
func (c *Comm) allreduceMax(vec []int64, p Patience) error {
	v, n := (*C.int64_t)(unsafe.Pointer(&vec[0])), C.int(len(vec))
	blocking := func() C.int { return C.hv_allreduce_i64_max(v, n, c.h) }
	if p.Max > 0 {
		return c.patient(p, blocking, func(req *C.MPI_Request) C.int { return C.hv_iallreduce_i64_max(v, n, c.h, req) })
	}
	if rc := blocking(); rc != 0 {
		return newError("MPI_Allreduce", rc)
	}
	return nil
}

// allgatherInts gathers every rank's v (all of one length) on every rank,
// in rank order.
func (c *Comm) allgatherInts(v []int64) ([]int64, error) {
	all := make([]int64, len(v)*c.size)
	counts := make([]int, c.size)
	for r := range counts {
		counts[r] = len(v)
	}
	cs, ds := cInts(counts)
	if rc := C.hv_allgatherv(unsafe.Pointer(&v[0]), C.int(len(v)), unsafe.Pointer(&all[0]), cptr(cs), cptr(ds), C.int(tensor.Int64), c.h); rc != 0 {
		return nil, newError("MPI_Allgatherv", rc)
	}
	return all, nil
}

// check runs the transports' per-rank check of a (agree.Args.Check) and
// MPI's own: the counts of a v-collective, and their sums, must fit in the
// C ints of one MPI call.
func (c *Comm) check(a *agree.Args) error {
	a.Rank, a.Size = c.rank, c.size
	if err := a.Check(); err != nil {
		return err
	}
	for _, cs := range [][]int{a.Counts, a.RecvCounts} {
		if !fitsCounts(cs, c.limit) {
			return fmt.Errorf("counts total %d elements, more than one MPI call can address (%d); split the collective", agree.Sum(cs), c.limit)
		}
	}
	return nil
}

// checkPair validates the buffers of a point-to-point exchange on one rank.
func checkPair(send, recv *tensor.Tensor) error {
	if err := agree.HostTensor("send", send); err != nil {
		return err
	}
	if err := agree.HostTensor("receive", recv); err != nil {
		return err
	}
	if send.DType() != recv.DType() {
		return fmt.Errorf("send dtype %v differs from receive dtype %v", send.DType(), recv.DType())
	}
	return nil
}

// ptr returns the address of a host buffer, nil when it is empty.
func ptr(t *tensor.Tensor) unsafe.Pointer {
	if t == nil {
		return nil
	}
	b := t.Bytes()
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func dtypeOf(t *tensor.Tensor) tensor.DType {
	if t == nil {
		return tensor.Invalid
	}
	return t.DType()
}

func lenOf(t *tensor.Tensor) int {
	if t == nil {
		return 0
	}
	return t.Len()
}

// Allreduce combines buf elementwise across ranks with op, in place
// (MPI_IN_PLACE). Every rank passes the same element count and dtype.
// Buffers beyond 2^31-1 elements are reduced in chunks.
func (c *Comm) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	if err := c.start(agree.Args{Kind: agree.Allreduce, Send: buf, Op: op}); err != nil {
		return err
	}
	dt := dtypeOf(buf)
	return c.chunked(buf, func(p unsafe.Pointer, k int) C.int {
		return C.hv_allreduce(p, C.int(k), C.int(dt), cOp(op), c.h)
	}, "MPI_Allreduce")
}

// AllreducePatient is Allreduce, waiting for the other ranks as p says
// (MPI_Iallreduce, tested, with sleeps between the tests) instead of in a
// blocking MPI_Allreduce, which spins in the library while a peer is
// still computing. With the node's doorbell (EnableDoorbell) and every
// rank of c on this node, it waits on the doorbell for every rank to
// arrive and then makes the blocking call, in which no rank then waits.
// Buffers beyond 2^31-1 elements take the blocking path.
func (c *Comm) AllreducePatient(buf *tensor.Tensor, op tensor.ReduceOp, p Patience) error {
	if p.Max <= 0 || (buf != nil && buf.Len() > c.limit) {
		return c.Allreduce(buf, op)
	}
	if err := c.usable(); err != nil {
		return err
	}
	a := agree.Args{Kind: agree.Allreduce, Send: buf, Op: op}
	if err := c.agreeWaiting(&a, c.check(&a), p); err != nil {
		return err
	}
	p0, n, dt, o := ptr(buf), C.int(lenOf(buf)), C.int(dtypeOf(buf)), cOp(op)
	return c.patient(p, func() C.int { return C.hv_allreduce(p0, n, dt, o, c.h) },
		func(req *C.MPI_Request) C.int { return C.hv_iallreduce(p0, n, dt, o, c.h, req) })
}

// patient makes one collective of c, waiting for the other ranks as p
// says. Where every rank of c is on this node and shares its doorbell,
// the ranks meet on the doorbell and then make the blocking call
// (blocking), which nobody waits in. Otherwise the rank starts the
// nonblocking call (start) and waits for it to complete (wait).
func (c *Comm) patient(p Patience, blocking func() C.int, start func(*C.MPI_Request) C.int) error {
	if c.bell != nil && c.bell.whole {
		c.bell.await(p)
		if rc := blocking(); rc != 0 {
			return newError("MPI_Allreduce", rc)
		}
		return nil
	}
	var req C.MPI_Request
	if rc := start(&req); rc != 0 {
		return newError("MPI_Iallreduce", rc)
	}
	return c.wait(&req, p)
}

// wait tests req, the collective c has just posted, until it completes.
// With the node's doorbell, it first waits there until every local rank
// has posted the collective (bell.await: nothing completes before); then
// it waits as p says: tests without pause for p.Spin, then sleeps between
// tests, for the exchange itself and the ranks on other nodes.
func (c *Comm) wait(req *C.MPI_Request, p Patience) error {
	if c.bell != nil {
		c.bell.await(p)
	}
	w := waiter{p: p}
	start := time.Now()
	for {
		var done C.int
		if rc := C.hv_test(req, &done); rc != 0 {
			return newError("MPI_Test", rc)
		}
		if done != 0 {
			return nil
		}
		if d := w.next(time.Since(start)); d > 0 {
			C.hv_sleep_ns(C.long(d))
		}
		yieldSlice()
	}
}

// EnableDoorbell gives the patient waits of c (AllreducePatient) the
// doorbell of this rank's node: a page of memory shared by the ranks of c
// that share the node, through which a rank that waits for its local peers
// sleeps until the last of them posts the collective, and is woken then,
// instead of sleeping on a timer. Where every rank of c shares the node,
// the ranks meet on the doorbell before the collective and then make the
// blocking call. It is collective over c: every rank
// calls it, before any patient collective on c or after the same ones.
// When some rank cannot set its doorbell up (no shared memory, not Linux),
// no rank uses one, and every rank returns that rank's error.
func (c *Comm) EnableDoorbell() error {
	if err := c.usable(); err != nil {
		return err
	}
	if c.bell != nil {
		return nil
	}
	node, err := c.SplitShared()
	if err != nil {
		return err
	}
	defer node.Free()
	b, local := c.nodeBell(node)
	// Every rank of c learns whether every rank has its doorbell: a
	// rank without one would leave its local peers sleeping to the cap.
	if err := c.agreeAll("doorbell", agree.Call{Kind: agree.Allreduce}, local, false, Patience{}); err != nil {
		b.close()
		return err
	}
	c.bell = b
	return nil
}

// nodeBell makes (node's first rank) or maps (the others) the node's
// doorbell memory, with two collectives over node whatever happens, so
// that a failing rank leaves none of its peers waiting.
func (c *Comm) nodeBell(node *Comm) (*bell, error) {
	var (
		path  string
		mem   []byte
		unmap func() error
		err   error
	)
	name := make([]byte, msgLen)
	if node.rank == 0 {
		if path, mem, unmap, err = createBell(node.size); err == nil {
			copy(name, path)
		}
	}
	// The path, or an empty one when the first rank failed.
	if rc := C.hv_bcast_bytes(unsafe.Pointer(&name[0]), C.int(len(name)), 0, node.h); rc != 0 {
		err = errors.Join(err, newError("MPI_Bcast", rc))
	}
	if node.rank != 0 {
		switch p := unpackC(name); {
		case p == "":
			err = errors.New("mpi: doorbell: the node's first rank could not make its memory")
		default:
			mem, unmap, err = openBell(p, node.size)
		}
	}
	// Everyone has mapped it (or failed to): the file can go.
	if rc := C.hv_barrier(node.h); rc != 0 {
		err = errors.Join(err, newError("MPI_Barrier", rc))
	}
	if node.rank == 0 && path != "" {
		os.Remove(path)
	}
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, err
	}
	b, err := newBell(mem, node.rank, node.size)
	if err != nil {
		unmap()
		return nil, err
	}
	b.unmap, b.whole = unmap, node.size == c.size
	return b, nil
}

// sleepThenSlack sleeps as the patient wait does, on one OS thread, and
// returns that thread's timer slack after the sleep (for tests).
func sleepThenSlack(d time.Duration) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	C.hv_sleep_ns(C.long(d))
	return time.Duration(C.hv_timer_slack())
}

// chunked calls fn over buf in pieces of at most c.limit elements.
func (c *Comm) chunked(buf *tensor.Tensor, fn func(p unsafe.Pointer, n int) C.int, call string) error {
	n := buf.Len()
	if n <= c.limit {
		if rc := fn(ptr(buf), n); rc != 0 {
			return newError(call, rc)
		}
		return nil
	}
	base, es := ptr(buf), buf.DType().Size()
	for _, s := range spans(n, c.limit) {
		if rc := fn(unsafe.Add(base, s.off*es), s.n); rc != 0 {
			return newError(call, rc)
		}
	}
	return nil
}

// Bcast copies buf from root to every rank. Buffers beyond 2^31-1 elements
// travel in chunks.
func (c *Comm) Bcast(buf *tensor.Tensor, root int) error {
	if err := c.start(agree.Args{Kind: agree.Bcast, Send: buf, Root: root}); err != nil {
		return err
	}
	dt := dtypeOf(buf)
	return c.chunked(buf, func(p unsafe.Pointer, k int) C.int {
		return C.hv_bcast(p, C.int(k), C.int(dt), C.int(root), c.h)
	}, "MPI_Bcast")
}

// Sendrecv sends all of send to rank dest and receives all of recv from
// rank source (MPI_Sendrecv; -1 for no peer, MPI_PROC_NULL), in pieces of
// at most 2^31-1 elements. It is point to point: only the pairs take part,
// so there is no agreement check; the ranks must agree that when r sends
// to d, d receives from r as many elements of the same dtype (as
// comm.Exchange, with the agreement check off, guarantees by contract).
// Arguments that one rank can tell are wrong are refused before any data
// moves.
func (c *Comm) Sendrecv(send *tensor.Tensor, dest int, recv *tensor.Tensor, source int) error {
	if err := c.usable(); err != nil {
		return err
	}
	err := checkPair(send, recv)
	for _, p := range []struct {
		what string
		r    int
	}{{"destination", dest}, {"source", source}} {
		if err == nil && (p.r < -1 || p.r >= c.size) {
			err = fmt.Errorf("%s rank %d out of range [-1, %d)", p.what, p.r, c.size)
		}
	}
	if err != nil {
		return &ArgError{Op: "sendrecv", Rank: c.rank, Msg: err.Error()}
	}
	ns, nr := send.Len(), recv.Len()
	if dest < 0 {
		ns = 0
	}
	if source < 0 {
		nr = 0
	}
	sb, rb, es, dt := ptr(send), ptr(recv), send.DType().Size(), send.DType()
	for off := 0; off == 0 || off < max(ns, nr); off += c.limit {
		ks, kr := min(max(ns-off, 0), c.limit), min(max(nr-off, 0), c.limit)
		d, s := dest, source
		if off > 0 && ks == 0 {
			d = -1 // this rank's message ended in an earlier piece
		}
		if off > 0 && kr == 0 {
			s = -1
		}
		if rc := C.hv_sendrecv(unsafe.Add(sb, off*es*sign(ks)), C.int(ks), C.int(d), unsafe.Add(rb, off*es*sign(kr)), C.int(kr), C.int(s), C.int(dt), c.h); rc != 0 {
			return newError("MPI_Sendrecv", rc)
		}
	}
	return nil
}

// sign is 1 for a positive n, else 0: an empty piece keeps its pointer.
func sign(n int) int {
	if n > 0 {
		return 1
	}
	return 0
}

// cInts converts counts to C ints and computes their displacements. The
// counts have been checked to fit.
func cInts(counts []int) (cs, ds []C.int) {
	cs = make([]C.int, len(counts))
	ds = make([]C.int, len(counts))
	off := 0
	for i, n := range counts {
		cs[i], ds[i] = C.int(n), C.int(off)
		off += n
	}
	return cs, ds
}

func cptr(s []C.int) *C.int {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// Allgatherv concatenates, in rank order, counts[r] elements from each rank
// r into recv on every rank. send holds exactly counts[Rank()] elements and
// recv at least the sum of counts. Every rank passes the same counts.
func (c *Comm) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	if err := c.start(agree.Args{Kind: agree.Allgatherv, Send: send, Recv: recv, Counts: counts}); err != nil {
		return err
	}
	cs, ds := cInts(counts)
	if rc := C.hv_allgatherv(ptr(send), C.int(counts[c.rank]), ptr(recv), cptr(cs), cptr(ds), C.int(send.DType()), c.h); rc != 0 {
		return newError("MPI_Allgatherv", rc)
	}
	return nil
}

// Gatherv is Allgatherv with the result on root only; recv is ignored on the
// other ranks (it may be nil there).
func (c *Comm) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	if err := c.start(agree.Args{Kind: agree.Gatherv, Send: send, Recv: recv, Counts: counts, Root: root}); err != nil {
		return err
	}
	var rp unsafe.Pointer
	var cs, ds []C.int
	if c.rank == root {
		rp = ptr(recv)
		cs, ds = cInts(counts)
	}
	if rc := C.hv_gatherv(ptr(send), C.int(counts[c.rank]), rp, cptr(cs), cptr(ds), C.int(send.DType()), C.int(root), c.h); rc != 0 {
		return newError("MPI_Gatherv", rc)
	}
	return nil
}

// Alltoallv sends sendCounts[r] elements of send (block r, blocks contiguous
// in rank order) to rank r and receives recvCounts[r] elements from rank r
// into block r of recv. send holds exactly the sum of sendCounts, recv at
// least the sum of recvCounts. What rank a sends to b must be what b expects from a; the check
// compares them with an alltoall of the send counts.
func (c *Comm) Alltoallv(send *tensor.Tensor, sendCounts []int, recv *tensor.Tensor, recvCounts []int) error {
	if err := c.usable(); err != nil {
		return err
	}
	a := agree.Args{Kind: agree.Alltoallv, Send: send, Recv: recv, Counts: sendCounts, RecvCounts: recvCounts}
	local := c.check(&a)
	if err := c.agreeAlltoallv(&a, local); err != nil {
		return err
	}
	dt := dtypeOf(send)
	scs, sds := cInts(sendCounts)
	rcs, rds := cInts(recvCounts)
	if rc := C.hv_alltoallv(ptr(send), cptr(scs), cptr(sds), ptr(recv), cptr(rcs), cptr(rds), C.int(dt), c.h); rc != 0 {
		return newError("MPI_Alltoallv", rc)
	}
	return nil
}

// agreeAlltoallv is agree for an alltoallv: with the check on, the ranks
// first tell each other how much each sends each (an alltoall of the send
// counts), so that a rank that expects another count finds the ranks to
// disagree.
func (c *Comm) agreeAlltoallv(a *agree.Args, local error) error {
	if c.noChk {
		return c.agree(a, local)
	}
	out := make([]int64, c.size)
	in := make([]int64, c.size)
	if len(a.Counts) == c.size {
		for r, n := range a.Counts {
			out[r] = int64(n)
		}
	}
	if rc := C.hv_alltoall_i64((*C.int64_t)(unsafe.Pointer(&out[0])), (*C.int64_t)(unsafe.Pointer(&in[0])), 1, c.h); rc != 0 {
		return newError("MPI_Alltoall", rc)
	}
	disagrees := false
	if local == nil {
		for r := range c.size {
			disagrees = disagrees || in[r] != int64(a.RecvCounts[r])
		}
	}
	return c.agreeAll(a.Kind.String(), a.Call(), local, disagrees, Patience{})
}

// ReduceScatter combines send (the sum of counts elements) across ranks with
// op and leaves block Rank() of the result, counts[Rank()] elements, in recv
// (MPI_Reduce_scatter). Every rank passes the same counts.
func (c *Comm) ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error {
	if err := c.start(agree.Args{Kind: agree.ReduceScatter, Send: send, Recv: recv, Counts: counts, Op: op}); err != nil {
		return err
	}
	dt := dtypeOf(send)
	cs, _ := cInts(counts)
	if rc := C.hv_reduce_scatter(ptr(send), ptr(recv), cptr(cs), C.int(dt), cOp(op), c.h); rc != 0 {
		return newError("MPI_Reduce_scatter", rc)
	}
	return nil
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier() error {
	if err := c.usable(); err != nil {
		return err
	}
	if rc := C.hv_barrier(c.h); rc != 0 {
		return newError("MPI_Barrier", rc)
	}
	return nil
}

// Split partitions the group by color (MPI_Comm_split): ranks with the same
// color form a new communicator, ordered by key and then by rank. A negative
// color takes part in the split but gets no communicator, and an error.
// The new communicator inherits the agreement-check setting.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	col := C.int(color)
	if color < 0 {
		col = C.hv_undefined()
	}
	var out C.MPI_Comm
	if rc := C.hv_split(c.h, col, C.int(key), &out); rc != 0 {
		return nil, newError("MPI_Comm_split", rc)
	}
	if color < 0 || C.hv_is_null(out) != 0 {
		return nil, fmt.Errorf("mpi: split: color %d is negative; this rank joins no communicator", color)
	}
	return c.derived(out)
}

// SplitShared returns the communicator of the ranks that share this rank's
// node memory (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), ordered by
// rank in c.
func (c *Comm) SplitShared() (*Comm, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	var out C.MPI_Comm
	if rc := C.hv_split_shared(c.h, C.int(c.rank), &out); rc != 0 {
		return nil, newError("MPI_Comm_split_type", rc)
	}
	return c.derived(out)
}

// Dup returns a duplicate of c (MPI_Comm_dup): the same group, a separate
// communication context.
func (c *Comm) Dup() (*Comm, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	var out C.MPI_Comm
	if rc := C.hv_dup(c.h, &out); rc != 0 {
		return nil, newError("MPI_Comm_dup", rc)
	}
	return c.derived(out)
}

func (c *Comm) derived(h C.MPI_Comm) (*Comm, error) {
	d, err := wrap(h, false)
	if err != nil {
		C.hv_free(&h)
		return nil, err
	}
	d.noChk, d.limit = c.noChk, c.limit
	return d, nil
}

// Free releases the communicator (MPI_Comm_free, collective). Later calls on
// c return ErrFreed. Freeing the world communicator only retires the handle.
// Free after Finalize only marks the handle freed.
func (c *Comm) Free() error {
	if c == nil || c.freed {
		return ErrFreed
	}
	c.freed = true
	c.bell.close()
	c.bell = nil
	if c.world || !Initialized() {
		return nil
	}
	if rc := C.hv_free(&c.h); rc != 0 {
		return newError("MPI_Comm_free", rc)
	}
	return nil
}

// Hooks for the package's multi-process tests (cgo cannot be used in test
// files).

// cThreadLevels returns the library's MPI_THREAD_SINGLE, _FUNNELED,
// _SERIALIZED and _MULTIPLE.
func cThreadLevels() [4]int {
	var l [4]C.int
	C.hv_thread_levels(&l[0])
	return [4]int{int(l[0]), int(l[1]), int(l[2]), int(l[3])}
}

// typeSize returns MPI_Type_size of the datatype that carries dt.
func typeSize(dt tensor.DType) int { return int(C.hv_type_size(C.int(dt))) }

// cOp is op's code in the C layer (the HV_SUM enum), or -1, which the C
// layer maps to MPI_OP_NULL, for the reductions that are not element-wise.
func cOp(op tensor.ReduceOp) C.int {
	if c, ok := cOps[op]; ok {
		return c
	}
	return -1
}

// cOps are the codes of the element-wise reductions in the C layer.
var cOps = map[tensor.ReduceOp]C.int{
	tensor.Sum: C.HV_SUM, tensor.Min: C.HV_MIN, tensor.Max: C.HV_MAX,
	tensor.Product: C.HV_PROD, tensor.BitAnd: C.HV_BAND, tensor.BitOr: C.HV_BOR,
}

// reduceLocal applies the MPI operation for (dt, op) to the elements of
// inout with MPI_Reduce_local: inout = in op inout.
func reduceLocal(dt tensor.DType, op tensor.ReduceOp, in, inout []byte) error {
	n := len(inout) / dt.Size()
	var pi, po unsafe.Pointer
	if n > 0 {
		pi, po = unsafe.Pointer(&in[0]), unsafe.Pointer(&inout[0])
	}
	if rc := C.hv_reduce_local(pi, po, C.int(n), C.int(dt), cOp(op)); rc != 0 {
		return newError("MPI_Reduce_local", rc)
	}
	return nil
}

// rawBcast calls MPI_Bcast with no checks at all, to provoke MPI's own
// argument errors.
func (c *Comm) rawBcast(buf []byte, root int) error {
	if rc := C.hv_bcast_bytes(unsafe.Pointer(&buf[0]), C.int(len(buf)), C.int(root), c.h); rc != 0 {
		return newError("MPI_Bcast", rc)
	}
	return nil
}
