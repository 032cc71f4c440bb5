package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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

// EnvGuard is set (to the guarded pids, comma-separated: mpirun's, or the
// embedded transport's workers') in the environment of a gohorovodrun
// started as the guard of a job. Users never set it.
const EnvGuard = "GOHOROVOD_GUARD"

// The guard's descriptors: ExtraFiles start at 3. The first process's
// pidfd is 3, the launcher's pipe 4, and any further pidfds follow from 5.
const (
	guardPidfd = 3 // the first guarded process's pidfd
	guardAlarm = 4 // read end of the launcher's pipe
	guardMore  = 5 // the second guarded process's pidfd, and so on
)

// GuardMain runs the guard if this process was started as one (EnvGuard
// set), or a process of the cross-memory attach probe (EnvCMAProbe; see
// ProbeCMA), and returns its exit status and true; otherwise it returns
// false at once. cmd/gohorovodrun calls it first.
func GuardMain() (int, bool) {
	if status, ok := CMAProbeMain(); ok {
		return status, true
	}
	v, ok := os.LookupEnv(EnvGuard)
	if !ok {
		return 0, false
	}
	var pids, pidfds []int
	for i, f := range strings.Split(v, ",") {
		if v == "" {
			break // nothing to guard: the job's directories only
		}
		pid, _ := strconv.Atoi(f)
		pids = append(pids, pid)
		if i == 0 {
			pidfds = append(pidfds, guardPidfd)
		} else {
			pidfds = append(pidfds, guardMore+i-1)
		}
	}
	// Ctrl-C and a hang-up reach the whole foreground process group; the
	// launcher handles them. The guard must outlive the launcher.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	status, gone := guardStop(pidfds, guardAlarm, pids, StopGrace, os.Stderr)
	if mark := os.Getenv(EnvGuardMark); gone && mark != "" {
		// What mpirun (or a worker) left behind, found by the job's mark:
		// SIGTERM, and SIGKILL after StopGrace.
		// No root: what the guard guarded has ended, and its pids may
		// name other processes by now.
		procs := newJobProcs(0, mark)
		procs.scan(true)
		if left := procs.alive(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "gohorovodrun (guard): stopping what the job left running (pid %s)\n", joinInts(left))
			procs.signal(syscall.SIGTERM)
			for deadline := time.Now().Add(StopGrace); len(procs.alive()) > 0 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
			procs.signal(syscall.SIGKILL)
		}
	}
	if v := os.Getenv(EnvGuardRemove); v != "" {
		// The job's directories go when the launcher does, whether it
		// removed them itself (a clean end) or died first.
		var b [1]byte
		for {
			n, err := unix.Read(guardAlarm, b[:])
			if n == 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
				break
			}
		}
		for _, dir := range strings.Split(v, "\n") {
			if filepath.IsAbs(dir) {
				_ = os.RemoveAll(dir)
			}
		}
	}
	return status, true
}

// EnvGuardMark is the job's mark ("GOHOROVOD_LAUNCHER=..."), by which the
// guard, once the launcher is gone, finds the job's processes that
// outlived what it guards (see jobProcs). Users never set it.
const EnvGuardMark = "GOHOROVOD_GUARD_MARK"

// EnvGuardRemove lists, one a line, the directories of the job (its Unix
// sockets, its shared-memory segments) that the guard removes once the
// launcher is gone. Users never set it.
const EnvGuardRemove = "GOHOROVOD_GUARD_REMOVE"

// guardJob waits until every guarded process (pidfds) has ended, then
// returns 0, or until alarm reports end-of-file (the launcher is gone)
// before that, then stops those still running: SIGTERM, and SIGKILL after
// grace.
func guardJob(pidfds []int, alarm int, pids []int, grace time.Duration, stderr io.Writer) int {
	status, _ := guardStop(pidfds, alarm, pids, grace, stderr)
	return status
}

// guardStop is guardJob, and also reports whether the launcher went while
// something guarded was still running.
func guardStop(pidfds []int, alarm int, pids []int, grace time.Duration, stderr io.Writer) (int, bool) {
	g := &guardPoll{name: "mpirun", stderr: stderr, running: len(pidfds), ended: make([]bool, len(pidfds))}
	if len(pids) > 1 {
		g.name = "the workers"
	}
	g.fds = []unix.PollFd{{Fd: int32(alarm), Events: unix.POLLIN}}
	for _, fd := range pidfds {
		g.fds = append(g.fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	for g.running > 0 {
		if !g.poll(-1) {
			return 2, false
		}
		if g.fds[0].Revents&unix.POLLNVAL != 0 {
			fmt.Fprintf(stderr, "gohorovodrun (guard): started without the launcher's pipe\n")
			return 2, false
		}
		if g.running == 0 {
			return 0, false // everything guarded has ended
		}
		if g.fds[0].Revents != 0 {
			var b [1]byte
			if n, _ := unix.Read(alarm, b[:]); n == 0 {
				break // end-of-file: the launcher is gone
			}
		}
	}
	if g.running == 0 {
		return 0, false
	}
	g.fds[0].Fd = -1
	return 0, g.stop(pidfds, pids, grace)
}

// guardPoll is the guard's watch over the launcher's pipe (fds[0]) and
// the guarded processes' pidfds.
type guardPoll struct {
	name    string // what is guarded, for the messages
	stderr  io.Writer
	fds     []unix.PollFd
	ended   []bool // by pidfd
	running int
}

// poll waits for events; it returns false on an error it reported.
func (g *guardPoll) poll(timeout int) bool {
	for i := range g.fds {
		g.fds[i].Revents = 0
	}
	_, err := unix.Poll(g.fds, timeout)
	if errors.Is(err, unix.EINTR) {
		return true
	}
	if err != nil {
		fmt.Fprintf(g.stderr, "gohorovodrun (guard): poll: %v\n", err)
		return false
	}
	for i := 1; i < len(g.fds); i++ {
		if g.fds[i].Revents&unix.POLLNVAL != 0 {
			fmt.Fprintf(g.stderr, "gohorovodrun (guard): started without the pidfds of %s\n", g.name)
			return false
		}
		if g.fds[i].Revents != 0 && !g.ended[i-1] {
			g.ended[i-1] = true
			g.fds[i].Fd = -1 // ignored from now on
			g.running--
		}
	}
	return true
}

// stop stops what is still running once the launcher is gone: SIGTERM,
// SIGKILL after grace. It reports false when everything had ended
// meanwhile.
func (g *guardPoll) stop(pidfds, pids []int, grace time.Duration) bool {
	var sent []int
	for i, fd := range pidfds {
		if !g.ended[i] && unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0) == nil {
			sent = append(sent, pids[i])
		}
	}
	if len(sent) == 0 {
		return true // ended meanwhile
	}
	fmt.Fprintf(g.stderr, "gohorovodrun (guard): the launcher is gone; stopping %s (pid %s)\n", g.name, joinInts(sent))
	deadline := time.Now().Add(grace)
	for g.running > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if !g.poll(int(left/time.Millisecond) + 1) {
			break
		}
	}
	if g.running == 0 {
		return true
	}
	fmt.Fprintf(g.stderr, "gohorovodrun (guard): %s (pid %s) still running %v after SIGTERM; killing it\n", g.name, joinInts(sent), grace)
	for i, fd := range pidfds {
		if !g.ended[i] {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	}
	return true
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// guard is a running guard, seen from the launcher.
type guard struct {
	cmd   *exec.Cmd
	alarm *os.File // write end; closing it tells the guard to stop mpirun
}

// startGuard starts self (a gohorovodrun binary) as the guard of the
// running processes ps (mpirun, or the workers; none: an elastic job,
// whose guard removes its directories only). It must be called before
// anything waits for them, so that the pids still name them.
//
// dirs are the job's directories, which the guard removes once the
// launcher is gone, however it ended; mark (may be "") is the job's mark,
// by which it finds what the job left running when the launcher died.
func startGuard(self string, ps []*os.Process, dirs []string, mark string, stderr io.Writer) (*guard, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var pids []string
	for _, p := range ps {
		fd, err := unix.PidfdOpen(p.Pid, 0)
		if err != nil {
			return nil, fmt.Errorf("pidfd_open: %w", err)
		}
		files = append(files, os.NewFile(uintptr(fd), "pidfd-"+strconv.Itoa(p.Pid)))
		pids = append(pids, strconv.Itoa(p.Pid))
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if len(files) == 0 {
		// Nothing to guard (the job's directories only): fd 3 is a
		// placeholder, so that the launcher's pipe is fd 4.
		null, err := os.Open(os.DevNull)
		if err != nil {
			w.Close()
			return nil, err
		}
		files = append(files, null)
	}
	cmd := exec.Command(self)
	cmd.Env = []string{EnvGuard + "=" + strings.Join(pids, ",")}
	if len(dirs) > 0 {
		cmd.Env = append(cmd.Env, EnvGuardRemove+"="+strings.Join(dirs, "\n"))
	}
	if mark != "" {
		cmd.Env = append(cmd.Env, EnvGuardMark+"="+mark)
	}
	cmd.Stderr = stderr
	extra := []*os.File{files[0], r} // guardPidfd, guardAlarm
	cmd.ExtraFiles = append(extra, files[1:]...)
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &guard{cmd: cmd, alarm: w}, nil
}

// release ends the guard once what it guards has been reaped: the guard
// sees that it has ended (the pidfds stay readable) and exits quietly.
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
