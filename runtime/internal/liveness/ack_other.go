//go:build !linux

package liveness

import (
	"net"
	"time"
)

// sinceAck cannot tell here: every silent rank is reported as frozen.
func sinceAck(net.Conn) (time.Duration, bool) { return 0, false }

// capRTO does nothing here.
func capRTO(net.Conn) {}
