//go:build linux

package embedded

import (
	"net"
	"syscall"
)

// tcpRTOMinUS is Linux's TCP_RTO_MIN_US socket option (kernel 6.16 on):
// the connection's floor on its retransmission timeout, in microseconds.
const tcpRTOMinUS = 45

// lowerRTOFloor sets c's retransmission timeout floor to minRTO (where
// the kernel has the option; older kernels refuse it and keep their
// floor). Linux's default floor, 200 ms, is made for the Internet: on a
// cluster's network, whose round trips take tens of microseconds, a
// lost packet at the tail of a message that no later packet reveals waits
// out that floor, and a step of a collective stalls for it. The kernel
// still raises the timeout above the floor wherever the measured round
// trips call for it.
func lowerRTOFloor(c *net.TCPConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpRTOMinUS, int(minRTO.Microseconds()))
	})
}
