//go:build unix

package jobload

import (
	"cmp"
	"net"
	"syscall"
)

// clientReceiveBuffer is the receive buffer of each rendezvous client's
// socket. The answer of a job of n carries all n members (800 KB at
// 10,000), and the server writes it to a bounded number of workers at a
// time; with loopback's default buffers (grown up to 6 MB) every answer
// would land in the kernel at once and all n clients of this one process
// would read and decode theirs together, 10,000 times 2 MB live, where a
// real job has each in a process of its own. A small buffer keeps the
// clients' process to the answers being written, and makes the server
// wait on its workers as it does on a real network.
const clientReceiveBuffer = 64 << 10

// dialer opens the clients' connections with clientReceiveBuffer.
var dialer = &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, clientReceiveBuffer)
	})
	return cmp.Or(err, serr)
}}
