//go:build linux && !nogpu

package cuda

import "unsafe"

// ncclInitByValueABI0 is the address of a small C-ABI trampoline
// (ncclinit_amd64.s) that calls ncclCommInitRank(comm, nranks, id, rank)
// with the 128-byte id copied onto the stack, as the System V ABI passes a
// struct of more than 16 bytes by value: purego.SyscallN passes only
// integer-sized arguments, and at most 15 of them.
var ncclInitByValueABI0 uintptr

// commInitRankByValue calls ncclCommInitRank at fn.
func commInitRankByValue(fn uintptr, comm *uintptr, nranks int, id *UniqueID, rank int) int {
	return call(ncclInitByValueABI0, fn, uintptr(unsafe.Pointer(comm)), iarg(nranks), uintptr(unsafe.Pointer(id)), iarg(rank))
}
