//go:build !unix

package jobload

import "net"

// dialer opens the clients' connections (with the system's buffers here;
// see dialer_unix.go).
var dialer = &net.Dialer{}
