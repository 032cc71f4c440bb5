//go:build nogpu

package cuda_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/cuda"
)

// TestWithoutGPUSupport: a binary built with the nogpu tag reports GPUs
// as unavailable, with the reason.
func TestWithoutGPUSupport(t *testing.T) {
	if _, err := cuda.Load(); !errors.Is(err, cuda.ErrNoDlopen) || !errors.Is(err, cuda.ErrUnavailable) {
		t.Errorf("Load = %v, want ErrNoDlopen", err)
	}
	if _, err := cuda.LoadNCCL(); !errors.Is(err, cuda.ErrNoDlopen) {
		t.Errorf("LoadNCCL = %v, want ErrNoDlopen", err)
	}
	if cuda.Available() {
		t.Errorf("Available without GPU support")
	}
	if d := cuda.Describe(); !strings.Contains(d, "nogpu") {
		t.Errorf("Describe = %q", d)
	}
}
