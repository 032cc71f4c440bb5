//go:build linux

package embedded

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// shmCreate creates a fresh file for a shared-memory link in shmDir,
// reserves its pages (so that a full /dev/shm fails here rather than with a
// SIGBUS later) and maps it. On failure nothing is left behind.
func shmCreate() (name string, mem []byte, err error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", nil, err
	}
	name = fmt.Sprintf("%s/%s%d-%s", shmDir, shmPrefix, os.Getpid(), hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	fail := func(err error) (string, []byte, error) {
		os.Remove(name)
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, shmFile); err != nil {
		return fail(err)
	}
	mem, err = syscall.Mmap(int(f.Fd()), 0, shmFile, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	return name, mem, nil
}

// shmOpen maps the file a peer created.
func shmOpen(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() != shmFile {
		return nil, fmt.Errorf("%s: not a %d-byte regular file", name, shmFile)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, shmFile, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return mem, nil
}

func shmUnlink(name string) { os.Remove(name) }

func shmUnmap(mem []byte) { syscall.Munmap(mem) }

const (
	futexWaitOp = 0 // FUTEX_WAIT, shared between processes
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr == val, for at most d (or until woken).
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes the sleepers on addr.
func futexWake(addr *uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1<<30, 0, 0, 0)
}
