package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The guard: gohorovodrun starts a second copy of itself beside mpirun
// that holds mpirun's pidfd and the read end of a pipe whose write end only
// the launcher holds. When the launcher dies, even by SIGKILL, the kernel
// closes the write end; the guard reads end-of-file, sends mpirun one
// SIGTERM (mpirun then stops every worker, on every host) and, if mpirun
// has not ended after StopGrace, SIGKILL. The pidfd makes the signals safe
// from pid reuse.
//
// A parent-death signal on mpirun does not do: the kernel sends it once for
// every launcher thread that exits while mpirun is its child, and Open
// MPI's mpirun takes a second SIGTERM as "abort now" and leaves its workers
// behind; a Go thread may also exit while the launcher lives.

// EnvGuard is set (to mpirun's pid) in the environment of a gohorovodrun
// started as the guard of a job. Users never set it.
const EnvGuard = "GOHOROVOD_GUARD"

// The guard's descriptors: ExtraFiles start at 3.
const (
	guardPidfd = 3 // mpirun's pidfd
	guardAlarm = 4 // read end of the launcher's pipe
)

// GuardMain runs the guard if this process was started as one (EnvGuard
// set) and returns its exit status and true; otherwise it returns false at
// once. cmd/gohorovodrun calls it first.
func GuardMain() (int, bool) {
	v, ok := os.LookupEnv(EnvGuard)
	if !ok {
		return 0, false
	}
	pid, _ := strconv.Atoi(v)
	// Ctrl-C and a hang-up reach the whole foreground process group; the
	// launcher handles them. The guard must outlive the launcher.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	return guardJob(guardPidfd, guardAlarm, pid, StopGrace, os.Stderr), true
}

// guardJob waits until mpirun (pidfd) ends, then returns 0, or until alarm
// reports end-of-file (the launcher is gone) before that, then stops
// mpirun: SIGTERM, and SIGKILL after grace.
func guardJob(pidfd, alarm, pid int, grace time.Duration, stderr io.Writer) int {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}, {Fd: int32(alarm), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(stderr, "gohorovodrun (guard): poll: %v\n", err)
			return 1
		}
		if (fds[0].Revents|fds[1].Revents)&unix.POLLNVAL != 0 {
			fmt.Fprintf(stderr, "gohorovodrun (guard): started without mpirun's pidfd and the launcher's pipe\n")
			return 2
		}
		if fds[0].Revents != 0 {
			return 0 // mpirun has ended
		}
		if fds[1].Revents != 0 {
			var b [1]byte
			if n, _ := unix.Read(alarm, b[:]); n == 0 {
				break // end-of-file: the launcher is gone
			}
		}
	}
	if err := unix.PidfdSendSignal(pidfd, unix.SIGTERM, nil, 0); err != nil {
		return 0 // mpirun has ended meanwhile
	}
	fmt.Fprintf(stderr, "gohorovodrun (guard): the launcher is gone; stopping mpirun (pid %d)\n", pid)
	fds = fds[:1]
	deadline := time.Now().Add(grace)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		if n > 0 {
			return 0
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			break
		}
	}
	fmt.Fprintf(stderr, "gohorovodrun (guard): mpirun (pid %d) still running %v after SIGTERM; killing it\n", pid, grace)
	_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	return 0
}

// guard is a running guard, seen from the launcher.
type guard struct {
	cmd   *exec.Cmd
	alarm *os.File // write end; closing it tells the guard to stop mpirun
}

// startGuard starts self (a gohorovodrun binary) as the guard of the
// running mpirun p. It must be called before anything waits for p, so that
// the pid still names mpirun.
func startGuard(self string, p *os.Process, stderr io.Writer) (*guard, error) {
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open: %w", err)
	}
	pidfd := os.NewFile(uintptr(fd), "mpirun-pidfd")
	defer pidfd.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self)
	cmd.Env = []string{EnvGuard + "=" + strconv.Itoa(p.Pid)}
	cmd.Stderr = stderr
	cmd.ExtraFiles = []*os.File{pidfd, r}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &guard{cmd: cmd, alarm: w}, nil
}

// release ends the guard once mpirun has been reaped: the guard sees that
// mpirun has ended (its pidfd stays readable) and exits quietly.
func (g *guard) release() {
	if g == nil {
		return
	}
	g.alarm.Close()
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
		<-done
	}
}

// startLocked starts cmd from an OS thread that stays locked until
// release is closed: a parent-death signal (SysProcAttr.Pdeathsig) fires
// when the thread that started the child exits, and Go ends a thread when
// a goroutine locked to it exits. Only the fallback without a guard uses
// Pdeathsig.
func startLocked(cmd *exec.Cmd, release <-chan struct{}) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			<-release
		}
	}()
	return <-started
}
