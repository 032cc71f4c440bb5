//go:build !linux

package launch

import "syscall"

func workerProcAttr(bool) *syscall.SysProcAttr { return nil }

func signalGroup(int, syscall.Signal) {}
