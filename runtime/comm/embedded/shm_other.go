//go:build !linux

package embedded

import (
	"errors"
	"io"
	"net"
	"time"
)

var errNoShm = errors.New("shared memory is supported on Linux only")

func shmCreate(int) (int, []byte, error) { return -1, nil, errNoShm }

func shmMap(int, int) ([]byte, error) { return nil, errNoShm }

func shmUnmap([]byte) {}

func closeFD(int) {}

func sendFD(*net.UnixConn, []byte, int) error { return errNoShm }

// fdReader reads a connection's bytes (no descriptors travel here).
type fdReader struct{ r io.Reader }

func newFDReader(nc net.Conn) *fdReader { return &fdReader{r: nc} }

func (f *fdReader) Read(p []byte) (int, error) { return f.r.Read(p) }

func (f *fdReader) pop() (int, bool) { return -1, false }

func (f *fdReader) closeAll() {}

func futexWait(*uint32, uint32, time.Duration) {}

func futexWake(*uint32) {}
