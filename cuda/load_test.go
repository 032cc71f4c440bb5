//go:build linux && (amd64 || arm64) && !nogpu

package cuda_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/cuda/internal/gpucheck"
	"github.com/gohorovod/gohorovod/internal/cudamock"
	"github.com/gohorovod/gohorovod/tensor"
)

// mocks returns the stand-ins for libcudart (CUDA 12.4) and libnccl
// (internal/cudamock: built with gcc, or prebuilt where there is none).
func mocks(t *testing.T) (cudart, nccl string) {
	t.Helper()
	return cudamock.Libraries(t, cudamock.CUDA124)
}

// noCUDA skips when this machine has a real CUDA runtime on the default
// search path: the not-found tests assume there is none.
func noCUDA(t *testing.T) {
	if _, err := cuda.OpenRuntime(cuda.ConfigFromEnv(func(k string) string {
		if k == cuda.EnvCudartPath || k == cuda.EnvNCCLPath {
			return ""
		}
		return os.Getenv(k)
	})); err == nil {
		t.Skip("a CUDA runtime is installed here")
	}
}

func TestLoadNotFoundListsEveryAttempt(t *testing.T) {
	noCUDA(t)
	empty := t.TempDir()
	_, err := cuda.OpenRuntime(cuda.LoadConfig{CudartDirs: []string{empty}})
	var lerr *cuda.LoadError
	if !errors.As(err, &lerr) {
		t.Fatalf("OpenRuntime = %v, want a *LoadError", err)
	}
	if !errors.Is(err, cuda.ErrUnavailable) {
		t.Errorf("a load failure must match ErrUnavailable")
	}
	msg := err.Error()
	for _, want := range []string{"CUDA runtime not found", cuda.EnvCudartPath, "tried libcudart.so:", "tried libcudart.so.12:",
		"tried libcudart.so.11.0:", "cannot open shared object file", "no candidate file in: " + empty} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestLoadOverride(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcudart.so.12")
	tests := []struct {
		name   string
		cfg    cuda.LoadConfig
		nccl   bool
		want   []string
		symbol string
	}{
		{"missing file", cuda.LoadConfig{CudartPath: missing}, false,
			[]string{"cannot load the CUDA runtime from GOHOROVOD_CUDART_PATH=" + missing, "No such file or directory"}, ""},
		{"libm is not the CUDA runtime", cuda.LoadConfig{CudartPath: "libm.so.6"}, false,
			[]string{"GOHOROVOD_CUDART_PATH=libm.so.6", "lacks symbol cudaGetDeviceCount", "libm.so.6"}, "cudaGetDeviceCount"},
		{"libc is not NCCL", cuda.LoadConfig{NCCLPath: "libc.so.6"}, true,
			[]string{"GOHOROVOD_NCCL_PATH=libc.so.6", "lacks symbol ncclGetVersion"}, "ncclGetVersion"},
		{"empty directory", cuda.LoadConfig{NCCLPath: t.TempDir()}, true,
			[]string{"libnccl.so.2: cannot open shared object file"}, ""},
	}
	cudart, _ := mocks(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.nccl {
				rt, rerr := cuda.OpenRuntime(cuda.LoadConfig{CudartPath: cudart})
				if rerr != nil {
					t.Fatal(rerr)
				}
				_, err = cuda.OpenNCCL(rt, tc.cfg)
			} else {
				_, err = cuda.OpenRuntime(tc.cfg)
			}
			var lerr *cuda.LoadError
			if !errors.As(err, &lerr) || !errors.Is(err, cuda.ErrUnavailable) {
				t.Fatalf("error = %v, want a *LoadError matching ErrUnavailable", err)
			}
			if len(lerr.Attempts) == 0 || len(lerr.Searched) != 0 {
				t.Errorf("an override must be the only thing tried: %+v", lerr)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			var serr *cuda.SymbolError
			if tc.symbol != "" && (!errors.As(lerr.Attempts[0].Err, &serr) || serr.Symbol != tc.symbol) {
				t.Errorf("attempt error = %v, want a *SymbolError for %s", lerr.Attempts[0].Err, tc.symbol)
			}
		})
	}
}

func TestSearchSkipsAnImpostorAndFindsTheLibrary(t *testing.T) {
	noCUDA(t)
	cudart, nccl := mocks(t)
	// The first directory holds libm under the runtime's name; the second
	// the mock. The search must record the impostor and go on.
	impostor := t.TempDir()
	libm := ""
	for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib/aarch64-linux-gnu"} {
		if _, err := os.Stat(filepath.Join(d, "libm.so.6")); err == nil {
			libm = filepath.Join(d, "libm.so.6")
			break
		}
	}
	if libm == "" {
		t.Skip("libm.so.6 not found")
	}
	if err := os.Symlink(libm, filepath.Join(impostor, "libcudart.so.12")); err != nil {
		t.Fatal(err)
	}
	rt, err := cuda.OpenRuntime(cuda.LoadConfig{CudartDirs: []string{impostor, filepath.Dir(cudart)}})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Path() != cudart || rt.Version() != (cuda.Version{Major: 12, Minor: 4}) {
		t.Errorf("loaded %s version %v, want %s 12.4", rt.Path(), rt.Version(), cudart)
	}
	n, err := cuda.OpenNCCL(rt, cuda.LoadConfig{NCCLDirs: []string{filepath.Dir(nccl)}})
	if err != nil {
		t.Fatal(err)
	}
	if n.Path() != nccl || n.Version().String() != "2.21.5" {
		t.Errorf("NCCL %s %v", n.Path(), n.Version())
	}
}

// TestGPUCheckAgainstMocks runs the whole gpucheck program through the real
// purego shim against the mock libraries, on device 1 so that a call that
// forgot to make its device current fails (the mock checks it per thread).
func TestGPUCheckAgainstMocks(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		fusion        []string
		v             cudamock.Variant
	}{
		{"12.4", "CUDA runtime 12.4", []string{"fusion copy in (3 tensors, 4 streams, no cudaMemcpyBatchAsync)",
			"fusion copy out (3 tensors, a call each)"}, cudamock.CUDA124},
		{"13.0", "CUDA runtime 13.0", []string{"fusion copy in (3 tensors, cudaMemcpyBatchAsync)",
			"fusion copy out (3 tensors, cudaMemcpyBatchAsync)", "fusion copy in (3 tensors, 1 stream)",
			"fusion copy out (3 tensors, 8 streams)", "fusion copy out (3 tensors, a call each)"}, cudamock.CUDA130},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cudart, nccl := cudamock.Libraries(t, tc.v)
			var out bytes.Buffer
			cfg := gpucheck.Config{Load: cuda.LoadConfig{CudartPath: cudart, NCCLPath: nccl}, Device: 1, Iters: 2,
				HostBytes: 1 << 16, NCCL: true, Sizes: []int{1000, 4096, 7}}
			if err := gpucheck.Run(&out, cfg); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			for _, want := range append([]string{tc.version, "driver supports CUDA 12.6", "2 device(s)", "GPU 1 (0000:3b:00.0) sm_90, 132 SMs, 80.0 GiB",
				"ok   device contract", "x plain", "ok   NCCL 2.21.5", "PASS"}, tc.fusion...) {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func TestRuntimeErrorsCarryCUDAStrings(t *testing.T) {
	cudart, nccl := mocks(t)
	rt, err := cuda.OpenRuntime(cuda.LoadConfig{CudartPath: cudart})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rt.Malloc(0, 1<<41)
	var cerr *cuda.Error
	if !errors.As(err, &cerr) || cerr.Code != 2 || cerr.Name != "cudaErrorMemoryAllocation" || cerr.Msg != "out of memory" {
		t.Fatalf("Malloc(2 TiB) = %v, want cudaErrorMemoryAllocation", err)
	}
	if want := "cuda: cudaMalloc(2199023255552 bytes) on device 0: out of memory (cudaErrorMemoryAllocation, code 2)"; err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
	if _, err := rt.Malloc(7, 8); !errors.As(err, &cerr) || cerr.Name != "cudaErrorInvalidDevice" {
		t.Errorf("Malloc on device 7 = %v, want cudaErrorInvalidDevice", err)
	}
	if _, err := rt.OpenDevice(2); err == nil || !strings.Contains(err.Error(), "device 2 does not exist (2 visible)") {
		t.Errorf("OpenDevice(2) = %v", err)
	}
	if err := rt.FreeHost(make([]byte, 8)); err == nil {
		t.Errorf("FreeHost of Go memory succeeded")
	}
	pinned, err := rt.MallocHost(0, 64)
	if err != nil || len(pinned) != 64 {
		t.Fatalf("MallocHost = %d bytes, %v", len(pinned), err)
	}
	pinned[63] = 1 // the memory is usable from Go
	must(t, rt.FreeHost(pinned))
	if err := rt.FreeHost(pinned); err == nil {
		t.Errorf("double FreeHost succeeded")
	}

	// Events: not done before being recorded, done after; elapsed time.
	s, err := rt.NewStream(0)
	must(t, err)
	a, err := rt.NewEvent(0, true)
	must(t, err)
	b, err := rt.NewEvent(0, true)
	must(t, err)
	if done, err := a.Done(); done || err != nil {
		t.Errorf("unrecorded event Done = %v, %v; want false, nil (cudaErrorNotReady)", done, err)
	}
	must(t, a.Record(s))
	must(t, b.Record(s))
	must(t, b.Synchronize())
	if done, err := b.Done(); !done || err != nil {
		t.Errorf("recorded event Done = %v, %v", done, err)
	}
	if d, err := b.Since(a); err != nil || d != 1500*time.Microsecond {
		t.Errorf("Since = %v, %v; want 1.5ms", d, err)
	}
	must(t, a.Destroy())
	must(t, b.Destroy())
	must(t, s.Destroy())

	// NCCL: errors carry NCCL's strings and its last-error detail.
	n, err := cuda.OpenNCCL(rt, cuda.LoadConfig{NCCLPath: nccl})
	must(t, err)
	id, err := n.UniqueID()
	must(t, err)
	if string(id[:4]) != "MOCK" || id[127] != 'Z' {
		t.Errorf("unique id bytes not passed through: %q...%q", id[:4], id[127])
	}
	_, err = n.NewComm(0, 1, 0, cuda.UniqueID{})
	var nerr *cuda.NCCLError
	if !errors.As(err, &nerr) || nerr.Code != 4 || nerr.Msg != "invalid argument" || nerr.Detail != "mock: last error detail" {
		t.Errorf("NewComm with a zero id = %v, want ncclInvalidArgument with detail", err)
	}
	if _, err := n.NewComm(5, 1, 0, id); !errors.As(err, &cerr) || cerr.Code != 101 {
		t.Errorf("NewComm on device 5 = %v, want cudaErrorInvalidDevice", err)
	}
	c, err := n.NewComm(0, 1, 0, id)
	must(t, err)
	p, err := rt.Malloc(0, 64)
	must(t, err)
	// A send outside a group is refused by (mock) NCCL, inside one it pairs.
	if err := c.Send(p, 4, tensor.Float32, 0, nil); !errors.As(err, &nerr) || nerr.Code != 5 {
		t.Errorf("Send outside a group = %v, want ncclInvalidUsage", err)
	}
	if err := c.AllReduce(p, p, 4, tensor.Int32, tensor.BitAnd, nil); err == nil || !strings.Contains(err.Error(), "no BitAnd reduction") {
		t.Errorf("bitwise allreduce = %v", err)
	}
	if err := c.Broadcast(p, p, 4, tensor.Int32, 1, nil); err == nil || !strings.Contains(err.Error(), "root 1 is out of range") {
		t.Errorf("broadcast from rank 1 of 1 = %v", err)
	}
	if err := c.AllToAll(p, []int{1, 2}, p, []int{1}, tensor.Int32, nil); err == nil {
		t.Errorf("AllToAll with the wrong number of counts succeeded")
	}
	must(t, c.AsyncError())
	must(t, c.Destroy())
	if err := c.AllReduce(p, p, 4, tensor.Float32, tensor.Sum, nil); err == nil || !strings.Contains(err.Error(), "destroyed") {
		t.Errorf("AllReduce after Destroy = %v", err)
	}
	must(t, rt.Free(0, p))
}

// TestCopyBatchAgainstMocks copies a fusion buffer's tensors with
// GPU.CopyDtoDBatch through the three kinds of runtime: before CUDA 12.8
// (no cudaMemcpyBatchAsync: the copies are spread over side streams,
// forked and joined with events), 12.8 (the batch call with failIdx) and
// 13.0 (without). Each must move every byte, with one call where it can,
// and name the copy that failed where the runtime says.
func TestCopyBatchAgainstMocks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v        cudamock.Variant
		batch    bool
		failText string
	}{
		{"12.4 fan-out", cudamock.CUDA124, false, "batched copy 3: "},
		{"12.8 batch", cudamock.CUDA128, true, "failed at copy 3 ("},
		{"13.0 batch", cudamock.CUDA130, true, "cudaMemcpyBatchAsync (6 copies)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cudart, _ := cudamock.Libraries(t, tc.v)
			rt, err := cuda.OpenRuntime(cuda.LoadConfig{CudartPath: cudart})
			must(t, err)
			if rt.HasMemcpyBatch() != tc.batch {
				t.Fatalf("HasMemcpyBatch = %v with %v", rt.HasMemcpyBatch(), rt.Version())
			}
			g, err := rt.OpenDevice(1)
			must(t, err)
			sizes := []int{1000, 4, 0, 77777, 256, 3, 12345}
			var srcs, dsts []uintptr
			total := 0
			for _, n := range sizes {
				total += n
			}
			fused, err := g.Alloc(total)
			must(t, err)
			off := 0
			for i, n := range sizes {
				p, err := g.Alloc(n)
				must(t, err)
				if n > 0 {
					b := make([]byte, n)
					for j := range b {
						b[j] = byte(i*31 + j)
					}
					must(t, g.CopyHtoD(p, b))
				}
				srcs, dsts = append(srcs, p), append(dsts, fused+uintptr(off))
				off += n
			}
			before := cudamock.Counts(t, cudart)
			must(t, g.CopyDtoDBatch(dsts, srcs, sizes))
			got := make([]byte, total)
			must(t, g.CopyDtoH(got, fused))
			must(t, g.Sync())
			after := cudamock.Counts(t, cudart)
			off = 0
			for i, n := range sizes {
				for j := 0; j < n; j++ {
					if got[off+j] != byte(i*31+j) {
						t.Fatalf("tensor %d byte %d = %d, want %d", i, j, got[off+j], byte(i*31+j))
					}
				}
				off += n
			}
			calls, batched, waits := after[0]-before[0], after[1]-before[1], after[3]-before[3]
			if tc.batch && (batched != 1 || after[2]-before[2] != 6 || calls != 1 || waits != 0) {
				t.Errorf("batch: %d batch calls of %d copies, %d cudaMemcpyAsync, %d waits; want 1 of 6 (the empty copy left out), 1 (the read back), 0",
					batched, after[2]-before[2], calls, waits)
			}
			if !tc.batch && (batched != 0 || calls != 7 || waits != 2*cuda.FanOutStreams || after[4] != 1+cuda.FanOutStreams) {
				t.Errorf("fan-out: %d batch calls, %d cudaMemcpyAsync, %d waits, %d streams; want 0, 7, %d, %d",
					batched, calls, waits, after[4], 2*cuda.FanOutStreams, 1+cuda.FanOutStreams)
			}
			// A source outside device memory: the error names the copy
			// where the runtime says which (12.8), and nothing hangs.
			host := make([]byte, 64)
			bad := append([]uintptr(nil), srcs...)
			bad[3] = uintptr(unsafe.Pointer(&host[0]))
			err = g.CopyDtoDBatch(dsts, bad, sizes)
			if err == nil || !strings.Contains(err.Error(), tc.failText) {
				t.Errorf("bad batch: %v, want %q", err, tc.failText)
			}
			runtime.KeepAlive(host)
			must(t, g.Sync())
			for _, p := range append(srcs, fused) {
				must(t, g.Free(p))
			}
			must(t, g.Close())
		})
	}
}

// TestStageCopyFailsMidway stages 10000 bytes in pieces of 1024 through
// the real GPU.Stage (two streams, events, pinned memory) against the mock
// runtime, whose fourth copy one way fails with cudaErrorIllegalAddress:
// the copy to the host of piece 3 (fn sees no piece: all copies out are
// queued first), then the copy back of piece 3 (fn saw pieces 0-3, 0-2 are
// back). Stage returns the CUDA error naming the piece, at once, and the
// device goes on working: a full Stage after it is right.
func TestStageCopyFailsMidway(t *testing.T) {
	const n, piece = 10000, 1024
	for _, tc := range []struct {
		name     string
		kind     int
		text     string
		seen     int // pieces fn ran on
		restored int // pieces copied back
	}{
		{"to host", cudamock.DtoH, "staging piece 3 of 10: ", 0, 0},
		{"back to device", cudamock.HtoD, "staging piece 3 of 10 back: ", 4, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, cudart := mockDevice(t, cudamock.CUDA124, 1)
			p, err := g.Alloc(n)
			must(t, err)
			defer g.Free(p)
			host, err := g.AllocHost(n)
			must(t, err)
			defer g.FreeHost(host)
			in := make([]byte, n)
			for i := range in {
				in[i] = byte(i * 7)
			}
			must(t, g.CopyHtoD(p, in))
			must(t, g.Sync())
			cudamock.FailCopy(t, cudart, tc.kind, 4, cudamock.Illegal)
			seen := 0
			done := make(chan error, 1)
			go func() {
				done <- g.Stage(p, host, piece, func(b []byte) error {
					seen++
					for i := range b {
						b[i] ^= 0xff
					}
					return nil
				})
			}()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Stage hangs after a failed copy")
			}
			var cerr *cuda.Error
			if !errors.As(err, &cerr) || cerr.Name != "cudaErrorIllegalAddress" || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Stage = %v, want cudaErrorIllegalAddress after %q", err, tc.text)
			}
			if seen != tc.seen {
				t.Errorf("fn ran on %d pieces, want %d", seen, tc.seen)
			}
			out := make([]byte, n)
			must(t, g.CopyDtoH(out, p))
			must(t, g.Sync())
			for i := range out {
				want := in[i]
				if i < tc.restored*piece {
					want ^= 0xff
				}
				if out[i] != want {
					t.Fatalf("byte %d = %#x after the failure, want %#x", i, out[i], want)
				}
			}
			// The device still works, and a whole Stage is right.
			must(t, g.Stage(p, host, piece, func(b []byte) error { return nil }))
			must(t, g.Sync())
		})
	}
}

// TestCopyDtoDSpreadAgainstMock spreads five copies over 2 and then 8
// side streams on a runtime that has cudaMemcpyBatchAsync (the fallback
// gpucheck measures beside it): no batch call, a copy call each, a fork
// wait and a join wait per stream used (8 streams for five copies: five),
// the side streams made once and grown, every byte right.
func TestCopyDtoDSpreadAgainstMock(t *testing.T) {
	g, cudart := mockDevice(t, cudamock.CUDA130, 0)
	sizes := []int{10, 300, 1, 4096, 77}
	total := 0
	for _, n := range sizes {
		total += n
	}
	fused, err := g.Alloc(total)
	must(t, err)
	defer g.Free(fused)
	var srcs, dsts []uintptr
	off := 0
	for i, n := range sizes {
		p, err := g.Alloc(n)
		must(t, err)
		defer g.Free(p)
		must(t, g.Memset(p, byte(i+1), n))
		srcs, dsts = append(srcs, p), append(dsts, fused+uintptr(off))
		off += n
	}
	streams := 1 // the device's
	for _, k := range []int{2, 8} {
		must(t, g.Memset(fused, 0, total))
		before := cudamock.Counts(t, cudart)
		must(t, g.CopyDtoDSpread(dsts, srcs, sizes, k))
		after := cudamock.Counts(t, cudart)
		used := min(k, len(sizes))
		streams = max(streams, 1+used)
		if calls, batched, waits := after[0]-before[0], after[1]-before[1], after[3]-before[3]; calls != 5 || batched != 0 || waits != int64(2*used) {
			t.Errorf("%d streams: %d copy calls, %d batch calls, %d waits; want 5, 0, %d", k, calls, batched, waits, 2*used)
		}
		if after[4] != int64(streams) {
			t.Errorf("%d streams: %d streams made in all, want %d", k, after[4], streams)
		}
		got := make([]byte, total)
		must(t, g.CopyDtoH(got, fused))
		must(t, g.Sync())
		off := 0
		for i, n := range sizes {
			for j := off; j < off+n; j++ {
				if got[j] != byte(i+1) {
					t.Fatalf("%d streams: tensor %d byte %d = %d", k, i, j-off, got[j])
				}
			}
			off += n
		}
	}
	if err := g.CopyDtoDSpread(dsts, srcs, sizes, 0); err == nil {
		t.Errorf("spreading over 0 streams succeeded")
	}
}

// TestCopyBatchRefusedAgainstMock: a runtime that has cudaMemcpyBatchAsync
// but refuses it (cudaErrorNotSupported, as with a driver older than the
// runtime; or cudaErrorInvalidValue for copies that are fine) makes
// CopyDtoDBatch spread the copies instead, that time and every later one,
// and BatchRefused say why; the copies are right.
func TestCopyBatchRefusedAgainstMock(t *testing.T) {
	for _, tc := range []struct {
		code int
		name string
	}{{801, "cudaErrorNotSupported"}, {1, "cudaErrorInvalidValue"}} {
		t.Run(tc.name, func(t *testing.T) {
			g, cudart := mockDevice(t, cudamock.CUDA130, 0)
			sizes := []int{10, 300, 4096}
			var srcs, dsts []uintptr
			for i, n := range sizes {
				s, err := g.Alloc(n)
				must(t, err)
				d, err := g.Alloc(n)
				must(t, err)
				defer g.Free(s)
				defer g.Free(d)
				must(t, g.Memset(s, byte(i+1), n))
				srcs, dsts = append(srcs, s), append(dsts, d)
			}
			cudamock.RefuseBatch(t, cudart, tc.code)
			for round := range 2 {
				before := cudamock.Counts(t, cudart)
				must(t, g.CopyDtoDBatch(dsts, srcs, sizes))
				after := cudamock.Counts(t, cudart)
				if calls, batched := after[0]-before[0], after[1]-before[1]; calls != 3 || batched != 0 {
					t.Errorf("round %d: %d copy calls, %d batches; want 3 spread copies", round, calls, batched)
				}
				var cerr *cuda.Error
				if err := g.BatchRefused(); !errors.As(err, &cerr) || cerr.Name != tc.name {
					t.Errorf("round %d: BatchRefused = %v, want %s", round, err, tc.name)
				}
				for i, n := range sizes {
					got := make([]byte, n)
					must(t, g.CopyDtoH(got, dsts[i]))
					must(t, g.Sync())
					if got[0] != byte(i+1) || got[n-1] != byte(i+1) {
						t.Fatalf("round %d: tensor %d not copied", round, i)
					}
					must(t, g.Memset(dsts[i], 0, n))
				}
				cudamock.RefuseBatch(t, cudart, 0) // refused once is refused for good
			}
		})
	}
}

// mockDevice opens device dev of the mock runtime of variant v (closed when
// the test ends) and returns it with the mock library's path.
func mockDevice(t *testing.T, v cudamock.Variant, dev int) (*cuda.GPU, string) {
	t.Helper()
	cudart, _ := cudamock.Libraries(t, v)
	rt, err := cuda.OpenRuntime(cuda.LoadConfig{CudartPath: cudart})
	must(t, err)
	g, err := rt.OpenDevice(dev)
	must(t, err)
	t.Cleanup(func() { g.Close() })
	return g, cudart
}
