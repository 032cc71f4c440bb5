//go:build linux

package liveness

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// sinceAck returns how long ago the kernel last received a TCP
// acknowledgement on c (TCP_INFO's tcpi_last_ack_recv), and whether it
// could tell.
func sinceAck(c net.Conn) (time.Duration, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return 0, false
	}
	return time.Duration(info.Last_ack_recv) * time.Millisecond, true
}

// tcpRTOMaxMS is Linux's TCP_RTO_MAX_MS socket option (kernel 6.15 on).
const tcpRTOMaxMS = 44

// capRTO sets c's retransmission timeout ceiling to one second where the
// kernel has TCP_RTO_MAX_MS (Linux 6.15 on; elsewhere the default, 120 s,
// stands): once a link that went quiet for less than the heartbeat timeout
// comes back, the beats queued behind the lost ones arrive within a second,
// not after the doubling retransmission timer's next expiry, which could
// fall past the timeout.
func capRTO(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, tcpRTOMaxMS, 1000)
	})
}
