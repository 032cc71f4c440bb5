//go:build linux && (amd64 || arm64) && !nogpu

package cudamock

import (
	"os/exec"
	"testing"

	"github.com/ebitengine/purego"
)

// TestPrebuiltIsCurrent: every prebuilt library was built from the sources
// as they are (rebuild with go generate ./internal/cudamock), has the
// variant's version and has cudaMemcpyBatchAsync exactly when the variant
// does. Needs no C compiler.
func TestPrebuiltIsCurrent(t *testing.T) {
	dir := t.TempDir()
	for _, v := range Variants {
		cudart, nccl := dir+"/"+v.Name, dir+"/"+v.Name+".nccl"
		ok, err := Prebuilt(v, cudart, nccl)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Skipf("no prebuilt mocks for %s", Platform())
		}
		for _, p := range []string{cudart, nccl} {
			if got := Source(t, p); got != SourceHash() {
				t.Errorf("%s was built from sources %s, they are now %s: run go generate ./internal/cudamock", p, got, SourceHash())
			}
		}
		checkVariant(t, v, cudart)
	}
}

// TestLibrariesBuildEveryVariant: built with gcc, each variant reports its
// version and has the batch call exactly when it should.
func TestLibrariesBuildEveryVariant(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	for _, v := range Variants {
		cudart, nccl := Libraries(t, v)
		if got := Source(t, nccl); got != SourceHash() {
			t.Errorf("built NCCL mock reports sources %s, want %s", got, SourceHash())
		}
		checkVariant(t, v, cudart)
	}
}

func checkVariant(t *testing.T, v Variant, cudart string) {
	t.Helper()
	h, err := purego.Dlopen(cudart, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	defer purego.Dlclose(h)
	var version func(*int32) int32
	purego.RegisterLibFunc(&version, h, "cudaRuntimeGetVersion")
	var got int32
	if code := version(&got); code != 0 || int(got) != v.Version {
		t.Errorf("%s: cudaRuntimeGetVersion = %d (code %d), want %d", v.Name, got, code, v.Version)
	}
	_, err = purego.Dlsym(h, "cudaMemcpyBatchAsync")
	if (err == nil) != (v.Batch != 0) {
		t.Errorf("%s: cudaMemcpyBatchAsync present %v, want %v", v.Name, err == nil, v.Batch != 0)
	}
}
