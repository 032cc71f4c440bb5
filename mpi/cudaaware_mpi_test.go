//go:build mpi && cgo

package mpi

import (
	"strings"
	"testing"
)

// TestCUDAAwareAgreesWithTheBuild checks the query against the headers: a
// library whose headers say it has no CUDA support must not claim it at
// run time, and the Open MPI installed by scripts/deps.sh is such a
// library.
func TestCUDAAwareAgreesWithTheBuild(t *testing.T) {
	build := CUDAAwareBuild()
	switch build {
	case "yes", "no", "unknown":
	default:
		t.Fatalf("CUDAAwareBuild = %q", build)
	}
	if build != "yes" && CUDAAware() {
		t.Errorf("CUDAAware() = true, but the headers say %q", build)
	}
	if Library == "Open MPI" && strings.Contains(LibraryVersion(), "Open MPI") && build == "unknown" {
		t.Errorf("Open MPI's mpi-ext.h should define MPIX_CUDA_AWARE_SUPPORT")
	}
	t.Logf("%s: CUDA-aware build %s, at run time %v", Library, build, CUDAAware())
}
