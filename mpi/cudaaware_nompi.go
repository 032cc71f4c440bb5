//go:build !mpi || !cgo

package mpi

// CUDAAware reports whether the MPI library accepts CUDA device pointers:
// never, without MPI support.
func CUDAAware() bool { return false }

// CUDAAwareBuild describes what the MPI headers say about CUDA support:
// "no", without MPI support.
func CUDAAwareBuild() string { return "no" }
