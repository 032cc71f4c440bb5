//go:build mpi && cgo && mpich

package mpi

// #cgo pkg-config: mpich
import "C"

// Library names the MPI implementation this binary links.
const Library = "MPICH"
