package launch

import "syscall"

// sysProcAttr makes the kernel send mpirun SIGTERM if the launcher dies:
// the fallback where no guard runs (Launcher.Guard empty). It is weaker
// than the guard: when the launcher is killed with SIGKILL, the kernel
// sends the signal once per launcher thread that exits while mpirun is its
// child, and Open MPI's mpirun takes a second SIGTERM as "abort now": it
// exits without stopping the workers (which then exit themselves where
// they can see the launcher; see runtime/guard.go). execute starts mpirun
// from a locked thread (startLocked) so that no thread exit fires it while
// the launcher lives.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// workerProcAttr puts a directly started worker in its own process group,
// so that Ctrl-C at the terminal reaches the launcher only (which stops
// the job in order) and stopping a worker reaches what it started. pdeath
// adds the parent-death signal, the fallback where no guard runs.
func workerProcAttr(pdeath bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if pdeath {
		a.Pdeathsig = syscall.SIGTERM
	}
	return a
}

// signalGroup sends sig to the process group pid leads.
func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }
