//go:build !linux

package embedded

import "net"

// lowerRTOFloor does nothing here: only Linux has the option.
func lowerRTOFloor(*net.TCPConn) {}
