package cuda_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/tensor"
)

func TestVersions(t *testing.T) {
	tests := []struct {
		code int
		nccl bool
		want string
	}{
		{12040, false, "12.4"},
		{11080, false, "11.8"},
		{13000, false, "13.0"},
		{22105, true, "2.21.5"},
		{21003, true, "2.10.3"},
		{2708, true, "2.7.8"},
		{2406, true, "2.4.6"},
	}
	for _, tc := range tests {
		v := cuda.CUDAVersion(tc.code)
		if tc.nccl {
			v = cuda.NCCLVersion(tc.code)
		}
		if v.String() != tc.want {
			t.Errorf("version %d (nccl %v) = %v, want %s", tc.code, tc.nccl, v, tc.want)
		}
	}
	if !(cuda.Version{Major: 2, Minor: 10}).AtLeast(cuda.Version{Major: 2, Minor: 9, Patch: 9}) ||
		(cuda.Version{Major: 2, Minor: 7}).AtLeast(cuda.Version{Major: 2, Minor: 10}) {
		t.Errorf("AtLeast is wrong")
	}
}

func TestNCCLTypeAndOp(t *testing.T) {
	// ncclDataType_t values from nccl.h.
	want := map[tensor.DType]int{tensor.Int8: 0, tensor.Uint8: 1, tensor.Int32: 2, tensor.Int64: 4, tensor.Uint64: 5,
		tensor.Float16: 6, tensor.Float32: 7, tensor.Float64: 8, tensor.BFloat16: 9, tensor.Bool: 1}
	for _, dt := range tensor.DTypes() {
		got, err := cuda.NCCLType(dt)
		w, ok := want[dt]
		if !ok {
			if err == nil || !strings.Contains(err.Error(), "no data type for "+dt.String()) {
				t.Errorf("NCCLType(%v) = %d, %v; want an error (NCCL has no such type)", dt, got, err)
			}
			continue
		}
		if err != nil || got != w {
			t.Errorf("NCCLType(%v) = %d, %v; want %d (known %v)", dt, got, err, w, ok)
		}
	}
	if _, err := cuda.NCCLType(tensor.Invalid); err == nil {
		t.Errorf("NCCLType(Invalid) succeeded")
	}
	ops := map[tensor.ReduceOp]int{tensor.Sum: 0, tensor.Product: 1, tensor.Max: 2, tensor.Min: 3}
	for _, op := range tensor.ReduceOps() {
		got, err := cuda.NCCLOp(op)
		w, ok := ops[op]
		if ok != (err == nil) || ok && got != w {
			t.Errorf("NCCLOp(%v) = %d, %v", op, got, err)
		}
	}
}

func TestErrorIsUnavailable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&cuda.Error{Code: 100, Name: "cudaErrorNoDevice"}, true},
		{&cuda.Error{Code: 35, Name: "cudaErrorInsufficientDriver"}, true},
		{&cuda.Error{Code: 34, Name: "cudaErrorStubLibrary"}, true},
		{&cuda.Error{Code: 2, Name: "cudaErrorMemoryAllocation"}, false},
		{&cuda.LoadError{Library: "NCCL"}, true},
		{cuda.ErrNoDlopen, true},
		{&cuda.NCCLError{Code: 2}, false},
	}
	for _, tc := range tests {
		if got := errors.Is(tc.err, cuda.ErrUnavailable); got != tc.want {
			t.Errorf("errors.Is(%v, ErrUnavailable) = %v", tc.err, got)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	venv := t.TempDir()
	site := filepath.Join(venv, "lib", "python3.12", "site-packages")
	for _, d := range []string{"nvidia/nccl/lib", "nvidia/cuda_runtime/lib"} {
		if err := os.MkdirAll(filepath.Join(site, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{
		"VIRTUAL_ENV":       venv,
		"CUDA_HOME":         "/opt/cuda-12.4",
		cuda.EnvCudartPath:  "/x/libcudart.so.12",
		cuda.EnvNCCLPath:    "/y/libnccl.so.2",
		"PATH":              "",
		"HOME":              "",
		"PYTHONPATH":        "",
		"CONDA_PREFIX":      "",
		"CUDA_PATH":         "",
		"CUDA_ROOT":         "",
		"LD_LIBRARY_PATH":   "/ignored",
		"unrelated_setting": "x",
	}
	cfg := cuda.ConfigFromEnv(func(k string) string { return env[k] })
	if cfg.CudartPath != "/x/libcudart.so.12" || cfg.NCCLPath != "/y/libnccl.so.2" {
		t.Errorf("overrides %q %q", cfg.CudartPath, cfg.NCCLPath)
	}
	for _, c := range []struct {
		dirs []string
		want string
	}{
		{cfg.CudartDirs, "/opt/cuda-12.4/lib64"},
		{cfg.CudartDirs, "/usr/local/cuda/lib64"},
		{cfg.CudartDirs, filepath.Join(site, "nvidia/cuda_runtime/lib")},
		{cfg.NCCLDirs, filepath.Join(site, "nvidia/nccl/lib")},
		{cfg.NCCLDirs, "/usr/lib/x86_64-linux-gnu"},
	} {
		if !slices.Contains(c.dirs, c.want) {
			t.Errorf("search directories lack %s: %v", c.want, c.dirs)
		}
	}
	if slices.Contains(cfg.CudartDirs, filepath.Join(site, "nvidia/nccl/lib")) {
		t.Errorf("NCCL's wheel directory is searched for the CUDA runtime")
	}
	// The prefix of a python3 on PATH is searched too.
	bin := filepath.Join(venv, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "python3"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	env["VIRTUAL_ENV"], env["PATH"] = "", bin
	cfg = cuda.ConfigFromEnv(func(k string) string { return env[k] })
	if !slices.Contains(cfg.NCCLDirs, filepath.Join(site, "nvidia/nccl/lib")) {
		t.Errorf("site-packages of the python3 on PATH not searched: %v", cfg.NCCLDirs)
	}
}
