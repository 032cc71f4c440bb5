//go:build linux

package embedded

import (
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shmCreate makes an anonymous memory file of size bytes for a ring,
// reserves its pages (so that a lack of memory fails here rather than with
// a SIGBUS later) and maps it. It has no name in any directory: once every
// descriptor and mapping of it is gone, so is its memory.
func shmCreate(size int) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate(shmName, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, nil, err
	}
	if err := unix.Fallocate(fd, 0, 0, int64(size)); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, mem, nil
}

// shmMap maps the ring a peer sent, after checking that the file holds
// size bytes.
func shmMap(fd, size int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(size) {
		return nil, syscall.EINVAL
	}
	return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func shmUnmap(mem []byte) { unix.Munmap(mem) }

func closeFD(fd int) { unix.Close(fd) }

// sendFD writes msg with fd attached (SCM_RIGHTS).
func sendFD(uc *net.UnixConn, msg []byte, fd int) error {
	n, _, err := uc.WriteMsgUnix(msg, unix.UnixRights(fd), nil)
	if err == nil && n != len(msg) {
		err = io.ErrShortWrite
	}
	return err
}

// fdReader reads a connection's bytes and keeps the descriptors that come
// with them (a peer's rings) until the frame that announced each is read.
// On a Unix socket it calls recvmsg itself, with buffers it keeps, so that
// a read allocates nothing.
type fdReader struct {
	r      io.Reader       // a connection other than a Unix socket
	rc     syscall.RawConn // a Unix socket
	recv   func(fd uintptr) bool
	oob    []byte
	fds    []int
	iov    unix.Iovec
	msg    unix.Msghdr
	n      int
	errno  syscall.Errno
	readTo []byte
}

func newFDReader(nc net.Conn) *fdReader {
	f := &fdReader{r: nc}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return f
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return f
	}
	f.rc, f.oob = rc, make([]byte, unix.CmsgSpace(16*4))
	f.recv = func(fd uintptr) bool {
		f.iov.Base = &f.readTo[0]
		f.iov.SetLen(len(f.readTo))
		f.msg.Iov = &f.iov
		f.msg.Iovlen = 1
		f.msg.Control = &f.oob[0]
		f.msg.SetControllen(len(f.oob))
		n, _, errno := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&f.msg)), unix.MSG_CMSG_CLOEXEC)
		if errno == unix.EAGAIN || errno == unix.EINTR {
			return false
		}
		f.n, f.errno = int(n), errno
		return true
	}
	return f
}

func (f *fdReader) Read(p []byte) (int, error) {
	if f.rc == nil {
		return f.r.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	f.readTo = p
	err := f.rc.Read(f.recv)
	f.readTo = nil
	if err != nil {
		return 0, err
	}
	if f.errno != 0 {
		return 0, f.errno
	}
	if oobn := int(f.msg.Controllen); oobn > 0 {
		f.keep(f.oob[:oobn])
	}
	if f.n == 0 {
		return 0, io.EOF
	}
	return f.n, nil
}

// keep takes the descriptors out of a control message.
func (f *fdReader) keep(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		if fds, err := unix.ParseUnixRights(&m); err == nil {
			f.fds = append(f.fds, fds...)
		}
	}
}

// pop returns the oldest descriptor received and not yet taken.
func (f *fdReader) pop() (int, bool) {
	if len(f.fds) == 0 {
		return -1, false
	}
	fd := f.fds[0]
	f.fds = f.fds[1:]
	return fd, true
}

// closeAll closes the descriptors never taken.
func (f *fdReader) closeAll() {
	for _, fd := range f.fds {
		unix.Close(fd)
	}
	f.fds = nil
}

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
