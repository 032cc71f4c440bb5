//go:build mpi && cgo

package mpi

/*
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

// hv_cuda_aware_build: 1 when the MPI headers say the library was built
// with CUDA support, 0 when they say it was not, -1 when they do not say.
static int hv_cuda_aware_build(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
	return MPIX_CUDA_AWARE_SUPPORT ? 1 : 0;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
	return 1;
#else
	return -1;
#endif
}

// hv_cuda_aware: whether the library accepts device pointers now.
static int hv_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
	return MPIX_Query_cuda_support();
#elif defined(MPIX_GPU_SUPPORT_CUDA)
	int ok = 0;
	if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &ok) != MPI_SUCCESS) return 0;
	return ok;
#else
	return 0;
#endif
}
*/
import "C"

// CUDAAware reports whether the MPI library accepts CUDA device pointers in
// its communication calls: Open MPI built with CUDA support
// (MPIX_CUDA_AWARE_SUPPORT in mpi-ext.h) that also reports it at run time
// (MPIX_Query_cuda_support, which --mca opal_cuda_support 0 turns off), or
// MPICH 4 with MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA). Libraries
// whose headers offer neither query are taken as not CUDA-aware.
func CUDAAware() bool { return C.hv_cuda_aware() != 0 }

// CUDAAwareBuild describes what the MPI headers this binary was built
// against say about CUDA support: "yes", "no" or "unknown".
func CUDAAwareBuild() string {
	switch C.hv_cuda_aware_build() {
	case 1:
		return "yes"
	case 0:
		return "no"
	}
	return "unknown"
}
