//go:build !linux

package launch

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

func workerProcAttr(bool) *syscall.SysProcAttr { return nil }

func signalGroup(int, syscall.Signal) {}
