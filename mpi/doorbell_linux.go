package mpi

import (
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// Futex operations on a word that other processes map too (no
// FUTEX_PRIVATE_FLAG).
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr holds v, at most limit (or until woken).
func futexWait(addr *uint32, v uint32, limit time.Duration) {
	ts := syscall.NsecToTimespec(int64(limit))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(v),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every sleeper on addr.
func futexWake(addr *uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// bellDir is where the doorbell's file is made (a variable for tests).
var bellDir = defaultBellDir

// defaultBellDir is /dev/shm, memory, where the machine has it; else the
// temporary directory.
func defaultBellDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// createBell makes the doorbell file for locals ranks and maps it; the
// others open it by the path it returns (openBell), and the caller removes
// it once they have.
func createBell(locals int) (string, []byte, func() error, error) {
	f, err := os.CreateTemp(bellDir(), "gohorovod-doorbell-*")
	if err != nil {
		return "", nil, nil, fmt.Errorf("mpi: doorbell: %w", err)
	}
	defer f.Close()
	n := pageBytes(bellBytes(locals))
	if err := f.Truncate(int64(n)); err != nil {
		os.Remove(f.Name())
		return "", nil, nil, fmt.Errorf("mpi: doorbell: %w", err)
	}
	mem, unmap, err := mapShared(f, n)
	if err != nil {
		os.Remove(f.Name())
		return "", nil, nil, err
	}
	return f.Name(), mem, unmap, nil
}

// openBell maps the doorbell file at path, made for locals ranks.
func openBell(path string, locals int) ([]byte, func() error, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("mpi: doorbell: %w", err)
	}
	defer f.Close()
	n := pageBytes(bellBytes(locals))
	if fi, err := f.Stat(); err != nil || fi.Size() < int64(n) {
		return nil, nil, fmt.Errorf("mpi: doorbell: %s is not a doorbell of %d ranks", path, locals)
	}
	return mapShared(f, n)
}

func mapShared(f *os.File, n int) ([]byte, func() error, error) {
	mem, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mpi: doorbell: mapping %s: %w", f.Name(), err)
	}
	return mem, func() error { return syscall.Munmap(mem) }, nil
}

// pageBytes rounds n up to whole pages.
func pageBytes(n int) int {
	p := os.Getpagesize()
	return (n + p - 1) / p * p
}
