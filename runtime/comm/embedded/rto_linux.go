//go:build linux

package embedded

import (
	"net"
	"syscall"
)

// Linux's socket options on the retransmission timeout: TCP_RTO_MIN_US
// (kernel 6.16 on), its floor in microseconds, and TCP_RTO_MAX_MS (6.15
// on), its ceiling in milliseconds.
const (
	tcpRTOMaxMS = 44
	tcpRTOMinUS = 45
)

// lowerRTOFloor sets c's retransmission timeout floor to minRTO and its
// ceiling to maxRTO (where the kernel has the options; older kernels
// refuse them and keep their own). Linux's default floor, 200 ms, is made
// for the Internet: on a cluster's network, whose round trips take tens of
// microseconds, a lost packet at the tail of a message that no later
// packet reveals waits out that floor, and a step of a collective stalls
// for it. The kernel still raises the timeout above the floor wherever the
// measured round trips call for it. The ceiling (default 120 s, reached by
// doubling) bounds how long a connection stays quiet after a link that
// went silent comes back.
func lowerRTOFloor(c *net.TCPConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpRTOMinUS, int(minRTO.Microseconds()))
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpRTOMaxMS, int(maxRTO.Milliseconds()))
	})
}
