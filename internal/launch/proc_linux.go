package launch

import "syscall"

// sysProcAttr makes the kernel send mpirun SIGTERM if the launcher dies.
//
// Known limit: when the launcher is killed with SIGKILL, the kernel sends
// the signal once per launcher thread as mpirun is reparented, and Open
// MPI's mpirun takes a second SIGTERM as "abort now": it exits without
// stopping the workers. MPI workers then lose their launcher and abort; a
// non-MPI worker would keep running. A one-shot guard process would fix
// this; Ctrl-C and SIGTERM to the launcher do not have the problem.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
