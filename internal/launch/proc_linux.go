package launch

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// workerProcAttr puts a directly started worker, or mpirun, in its own
// process group, so that Ctrl-C at the terminal reaches the launcher only
// (which stops the job in order: Open MPI's mpirun takes a second signal
// as "abort now" and leaves its workers behind) and stopping a worker
// reaches what it started. pdeath adds the parent-death signal, the
// fallback where no guard runs: weaker than the guard, since the kernel
// sends it once for every launcher thread that exits while the child is
// its own (the caller starts the child from a locked thread, startLocked).
func workerProcAttr(pdeath bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if pdeath {
		a.Pdeathsig = syscall.SIGTERM
	}
	return a
}

// signalGroup sends sig to the process group pid leads.
func signalGroup(pid int, sig syscall.Signal) { _ = syscall.Kill(-pid, sig) }

// isTerminal reports whether r is a terminal. mpirun reading it from a
// process group of its own would be stopped (SIGTTIN) where the MPI does
// not check that it is in the foreground first, so mpirun then stays in
// the launcher's group.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
