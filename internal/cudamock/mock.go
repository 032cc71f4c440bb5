package cudamock

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

//go:embed testdata/mockcudart.c testdata/mocknccl.c testdata/mockcuda.c
var sources embed.FS

//go:embed testdata/prebuilt
var prebuilt embed.FS

// Variant is one build of the mock CUDA runtime.
type Variant struct {
	Name    string // the prebuilt file's name
	Soname  string // the name the library is given
	Version int    // what cudaRuntimeGetVersion reports
	Batch   int    // cudaMemcpyBatchAsync's signature: 0 none, 12 with failIdx, 13 without
}

// The variants: before cudaMemcpyBatchAsync, with its CUDA 12.8 signature
// and with its CUDA 13.0 one.
var (
	CUDA124 = Variant{"libcudart-12.4.so", "libcudart.so.12", 12040, 0}
	CUDA128 = Variant{"libcudart-12.8.so", "libcudart.so.12", 12080, 12}
	CUDA130 = Variant{"libcudart-13.0.so", "libcudart.so.13", 13000, 13}
	// Variants lists every variant.
	Variants = []Variant{CUDA124, CUDA128, CUDA130}
)

// Copy directions for FailCopy, as cudaMemcpyKind numbers them, and the
// error code it injects by default.
const (
	AnyCopy = 0
	HtoD    = 1
	DtoH    = 2
	DtoD    = 3
	// Illegal is cudaErrorIllegalAddress.
	Illegal = 700
)

// ncclName is the prebuilt mock NCCL's file name.
const ncclName = "libnccl.so"

// SourceHash returns the SHA-256, in hex, of the two mock sources, as
// the libraries built from them report it (mockSource).
func SourceHash() string {
	h := sha256.New()
	for _, f := range []string{"testdata/mockcudart.c", "testdata/mocknccl.c"} {
		b, err := sources.ReadFile(f)
		if err != nil {
			panic(err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Platform names the prebuilt directory of this platform.
func Platform() string { return runtime.GOOS + "_" + runtime.GOARCH }

// Compile builds variant v of the mock CUDA runtime into cudart and the
// mock NCCL into nccl (either may be ""), with the C compiler cc, stamped
// with the sources' hash.
func Compile(cc string, v Variant, cudart, nccl string) error {
	dir, err := os.MkdirTemp("", "cudamock")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	stamp := fmt.Sprintf("-DMOCK_SOURCE=%q", SourceHash())
	for _, b := range []struct {
		src, out string
		flags    []string
	}{
		{"mockcudart.c", cudart, []string{fmt.Sprintf("-DMOCK_VERSION=%d", v.Version)}},
		{"mocknccl.c", nccl, nil},
	} {
		if b.out == "" {
			continue
		}
		src, err := sources.ReadFile("testdata/" + b.src)
		if err != nil {
			return err
		}
		in := filepath.Join(dir, b.src)
		if err := os.WriteFile(in, src, 0o644); err != nil {
			return err
		}
		flags := append([]string{"-shared", "-fPIC", "-O2", "-s", "-o", b.out, in, stamp}, b.flags...)
		if b.src == "mockcudart.c" && v.Batch != 0 {
			flags = append(flags, fmt.Sprintf("-DMOCK_BATCH=%d", v.Batch))
		}
		if out, err := exec.Command(cc, flags...).CombinedOutput(); err != nil {
			return fmt.Errorf("cudamock: building %s: %v\n%s", b.out, err, out)
		}
	}
	return nil
}

// CompileDriver builds the mock CUDA driver library (testdata/mockcuda.c:
// the copy kernel's module loading and launches) with the C compiler cc
// into path.
func CompileDriver(cc, path string) error {
	dir, err := os.MkdirTemp("", "cudamock")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src, err := sources.ReadFile("testdata/mockcuda.c")
	if err != nil {
		return err
	}
	in := filepath.Join(dir, "mockcuda.c")
	if err := os.WriteFile(in, src, 0o644); err != nil {
		return err
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-s", "-o", path, in).CombinedOutput(); err != nil {
		return fmt.Errorf("cudamock: building %s: %v\n%s", path, err, out)
	}
	return nil
}

// Prebuilt writes this platform's prebuilt variant v and mock NCCL to
// cudart and nccl; it reports false when there are none for the platform.
func Prebuilt(v Variant, cudart, nccl string) (bool, error) {
	for _, f := range [][2]string{{v.Name, cudart}, {ncclName, nccl}} {
		b, err := prebuilt.ReadFile("testdata/prebuilt/" + Platform() + "/" + f[0])
		if err != nil {
			return false, nil
		}
		if err := os.WriteFile(f[1], b, 0o755); err != nil {
			return false, err
		}
	}
	return true, nil
}
