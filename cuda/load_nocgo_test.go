//go:build !cgo

package cuda_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/cuda"
)

func TestWithoutCgoGPUsAreUnavailable(t *testing.T) {
	if _, err := cuda.Load(); !errors.Is(err, cuda.ErrNoCgo) || !errors.Is(err, cuda.ErrUnavailable) {
		t.Errorf("Load = %v, want ErrNoCgo", err)
	}
	if _, err := cuda.LoadNCCL(); !errors.Is(err, cuda.ErrNoCgo) {
		t.Errorf("LoadNCCL = %v, want ErrNoCgo", err)
	}
	if cuda.Available() {
		t.Errorf("Available without cgo")
	}
	if d := cuda.Describe(); !strings.Contains(d, "CGO_ENABLED=0") {
		t.Errorf("Describe = %q", d)
	}
}
