package launch

import "syscall"

// sysProcAttr makes the kernel send mpirun SIGTERM if the launcher dies
// (mpirun then stops the workers), so that a killed launcher leaves no job
// behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
