//go:build unix

package cputime

import (
	"syscall"
	"time"
)

// Seconds is the CPU time, user and system, that this process has used so
// far (getrusage RUSAGE_SELF), in seconds, and whether it could be read.
func Seconds() (float64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), true
}
