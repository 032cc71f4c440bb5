//go:build !linux

package embedded

import (
	"errors"
	"time"
)

var errNoShm = errors.New("shared memory is supported on Linux only")

func shmCreate() (string, []byte, error) { return "", nil, errNoShm }

func shmOpen(string) ([]byte, error) { return nil, errNoShm }

func shmUnlink(string) {}

func shmUnmap([]byte) {}

func futexWait(*uint32, uint32, time.Duration) {}

func futexWake(*uint32) {}
