//go:build !linux

package mpi

import (
	"errors"
	"time"
)

var errNoBell = errors.New("mpi: the doorbell needs Linux (futex)")

// futexWait sleeps a short while: without futexes nothing wakes it early.
func futexWait(addr *uint32, v uint32, limit time.Duration) {
	time.Sleep(min(limit, 50*time.Microsecond))
}

// futexWake does nothing without futexes.
func futexWake(addr *uint32) {}

func createBell(locals int) (string, []byte, func() error, error) { return "", nil, nil, errNoBell }

func openBell(path string, locals int) ([]byte, func() error, error) { return nil, nil, errNoBell }
