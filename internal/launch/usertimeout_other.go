//go:build !linux

package launch

import (
	"net"
	"time"
)

// setUserTimeout does nothing here: keep-alive alone notices a silent
// node.
func setUserTimeout(*net.TCPConn, time.Duration) {}
