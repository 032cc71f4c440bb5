//go:build !linux

package launch

import (
	"io"
	"syscall"
)

func workerProcAttr(bool) *syscall.SysProcAttr { return nil }

func signalGroup(int, syscall.Signal) {}

func isTerminal(io.Reader) bool { return false }
