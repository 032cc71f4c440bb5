//go:build mpi && cgo && !mpich

package mpi

// #cgo pkg-config: ompi-c
import "C"

// Library names the MPI implementation this binary links.
const Library = "Open MPI"
