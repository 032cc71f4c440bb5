//go:build linux

package embedded

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestLowerRTOFloor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*net.TCPConn)
	raw, _ := tc.SyscallConn()
	get := func() (int, error) {
		var v int
		var gerr error
		raw.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpRTOMinUS) })
		return v, gerr
	}
	before, err := get()
	if errors.Is(err, syscall.ENOPROTOOPT) {
		t.Skip("this kernel has no TCP_RTO_MIN_US (Linux 6.16 on): the floor stays the kernel's")
	}
	if err != nil {
		t.Fatal(err)
	}
	lowerRTOFloor(tc)
	after, err := get()
	if err != nil {
		t.Fatal(err)
	}
	// The kernel keeps the value in jiffies: read back, it may round up
	// to a tick (up to 10 ms at HZ=100).
	if time.Duration(after)*time.Microsecond > minRTO+10*time.Millisecond || after >= before {
		t.Errorf("the floor went from %d µs to %d µs; want about %v", before, after, minRTO)
	}
	var ceiling int
	var gerr error
	raw.Control(func(fd uintptr) { ceiling, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpRTOMaxMS) })
	if gerr == nil && time.Duration(ceiling)*time.Millisecond != maxRTO {
		t.Errorf("the ceiling is %d ms; want %v", ceiling, maxRTO)
	}
}
