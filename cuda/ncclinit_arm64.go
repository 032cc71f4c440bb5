//go:build linux && !nogpu

package cuda

import "unsafe"

// commInitRankByValue calls ncclCommInitRank at fn. The AAPCS64 passes a
// composite argument of more than 16 bytes by reference to a copy the
// caller made: the id's address takes the register the struct would have.
func commInitRankByValue(fn uintptr, comm *uintptr, nranks int, id *UniqueID, rank int) int {
	cp := *id
	return call(fn, uintptr(unsafe.Pointer(comm)), iarg(nranks), uintptr(unsafe.Pointer(&cp)), iarg(rank))
}
