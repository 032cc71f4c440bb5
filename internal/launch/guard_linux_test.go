package launch

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gohorovod/gohorovod/internal/procid"
)

// guardRig runs guardJob in this process over a real child standing in
// for mpirun.
type guardRig struct {
	child  *exec.Cmd
	pidfd  int
	r, w   *os.File
	stderr bytes.Buffer
	status chan int
}

func newGuardRig(t *testing.T, grace time.Duration, argv ...string) *guardRig {
	t.Helper()
	g := &guardRig{child: exec.Command(argv[0], argv[1:]...), status: make(chan int, 1)}
	if err := g.child.Start(); err != nil {
		t.Skip("cannot start", argv, err)
	}
	t.Cleanup(func() { g.child.Process.Kill(); g.child.Wait() })
	fd, err := unix.PidfdOpen(g.child.Process.Pid, 0)
	if err != nil {
		t.Skip("no pidfd_open here:", err)
	}
	g.pidfd = fd
	t.Cleanup(func() { unix.Close(fd) })
	if g.r, g.w, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.r.Close(); g.w.Close() })
	go func() {
		g.status <- guardJob([]int{g.pidfd}, int(g.r.Fd()), []int{g.child.Process.Pid}, grace, &g.stderr)
	}()
	return g
}

// waitChild reaps the child and returns the signal that ended it (0 if it
// exited).
func (g *guardRig) waitChild(t *testing.T) syscall.Signal {
	t.Helper()
	done := make(chan struct{})
	go func() { g.child.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the child is still running")
	}
	if ws, ok := g.child.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

func (g *guardRig) guardStatus(t *testing.T) int {
	t.Helper()
	select {
	case s := <-g.status:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("the guard did not return")
	}
	return -1
}

func TestGuardStopsMPIRunWhenLauncherGoes(t *testing.T) {
	g := newGuardRig(t, 10*time.Second, "sleep", "60")
	time.Sleep(20 * time.Millisecond)
	select {
	case s := <-g.status:
		t.Fatalf("the guard returned %d while the launcher lives", s)
	default:
	}
	g.w.Close() // what the kernel does when the launcher dies
	if sig := g.waitChild(t); sig != syscall.SIGTERM {
		t.Errorf("the child ended by signal %v, want SIGTERM", sig)
	}
	if s := g.guardStatus(t); s != 0 {
		t.Errorf("guard status %d", s)
	}
	if !strings.Contains(g.stderr.String(), "the launcher is gone; stopping mpirun (pid ") {
		t.Errorf("guard said %q", g.stderr.String())
	}
}

func TestGuardKillsMPIRunThatIgnoresSIGTERM(t *testing.T) {
	g := newGuardRig(t, 100*time.Millisecond, "sh", "-c", `trap "" TERM; exec sleep 60`)
	time.Sleep(50 * time.Millisecond) // let sh install the trap
	g.w.Close()
	if sig := g.waitChild(t); sig != syscall.SIGKILL {
		t.Errorf("the child ended by signal %v, want SIGKILL after the grace", sig)
	}
	g.guardStatus(t)
	if !strings.Contains(g.stderr.String(), "still running 100ms after SIGTERM; killing it") {
		t.Errorf("guard said %q", g.stderr.String())
	}
}

func TestGuardLeavesQuietlyWhenMPIRunEnds(t *testing.T) {
	g := newGuardRig(t, 10*time.Second, "sleep", "0.05")
	if s := g.guardStatus(t); s != 0 {
		t.Errorf("guard status %d", s)
	}
	g.w.Close() // the launcher releases it after reaping mpirun: no signal may follow
	if g.stderr.Len() != 0 {
		t.Errorf("guard said %q", g.stderr.String())
	}
}

// TestRunWithGuard runs a job through Run with the guard on (this test
// binary is the guard: launch_test's TestMain calls GuardMain) and the
// launcher named to the workers: the job runs as before, the guard leaves
// quietly, and GOHOROVOD_LAUNCHER names this process.
func TestRunWithGuard(t *testing.T) {
	f := newFixture(t)
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	f.l.Guard, f.l.Self = exe, procid.Self
	if err := f.l.Run(context.Background(), []string{"-np", "2", f.prog}); err != nil {
		t.Fatalf("Run = %v (stderr %s)", err, f.err.String())
	}
	if f.err.Len() != 0 {
		t.Errorf("stderr %q", f.err.String())
	}
	me, _ := procid.Self()
	if env := f.file(t, "env"); !strings.Contains(env, "GOHOROVOD_LAUNCHER="+me.String()+"\n") {
		t.Errorf("mpirun's environment lacks GOHOROVOD_LAUNCHER=%s", me)
	}
}

// TestGuardStopsEveryWorker: guarding several processes (the embedded
// transport's workers), the guard waits for all of them, and stops those
// still running when the launcher goes.
func TestGuardStopsEveryWorker(t *testing.T) {
	var kids []*exec.Cmd
	var pidfds, pids []int
	for _, argv := range [][]string{{"sleep", "0.01"}, {"sleep", "60"}, {"sleep", "60"}} {
		c := exec.Command(argv[0], argv[1:]...)
		if err := c.Start(); err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		fd, err := unix.PidfdOpen(c.Process.Pid, 0)
		if err != nil {
			t.Skip("no pidfd_open here:", err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		kids, pidfds, pids = append(kids, c), append(pidfds, fd), append(pids, c.Process.Pid)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var stderr bytes.Buffer
	status := make(chan int, 1)
	go func() { status <- guardJob(pidfds, int(r.Fd()), pids, 10*time.Second, &stderr) }()
	kids[0].Wait() // one worker ends on its own first
	time.Sleep(20 * time.Millisecond)
	w.Close()
	for _, k := range kids[1:] {
		k.Wait()
		if ws, ok := k.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
			t.Errorf("pid %d ended with %v, want SIGTERM", k.Process.Pid, k.ProcessState)
		}
	}
	select {
	case s := <-status:
		if s != 0 {
			t.Errorf("guard status %d", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the guard did not return")
	}
	want := "stopping the workers (pid " + strconv.Itoa(pids[1]) + ", " + strconv.Itoa(pids[2]) + ")"
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("guard said %q, want %q", stderr.String(), want)
	}
}
