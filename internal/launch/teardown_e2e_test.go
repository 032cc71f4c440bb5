package launch_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The launcher bounds its own teardown whatever mpirun does: these tests
// run gohorovodrun over a fake mpirun (GOHOROVOD_MPIRUN) that ignores
// SIGTERM and never reaps its children, with a worker that ignores
// SIGTERM too, as a wedged Open MPI does.

// fakeMPIRun is the wedged mpirun. It writes the pids of what it starts to
// $FAKE_DIR, a file into its shared-memory directory (as Open MPI's vader
// does), and, when $FAKE_FAIL is set, starts a rank 1 that exits 3 after
// a second, whose zombie it never reaps.
const fakeMPIRun = `#!/bin/sh
if [ "$1" = --version ]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi
d=$FAKE_DIR
echo "$OMPI_MCA_btl_vader_backing_directory" > "$d/vader"
[ -n "$OMPI_MCA_btl_vader_backing_directory" ] && touch "$OMPI_MCA_btl_vader_backing_directory/vader_segment.fake.0"
if [ -n "$FAKE_CLEAN" ]; then
	OMPI_COMM_WORLD_RANK=0 setsid sh -c 'echo $$ > "$0/stubborn.pid"; sleep 1' "$d" &
	OMPI_COMM_WORLD_RANK=1 setsid sh -c 'sleep 1' &
else
	OMPI_COMM_WORLD_RANK=0 setsid sh -c 'trap "" TERM; echo $$ > "$0/stubborn.pid"; exec sleep 300' "$d" &
fi
if [ -n "$FAKE_FAIL" ]; then
	OMPI_COMM_WORLD_RANK=1 sh -c 'sleep 1; exit 3' &
fi
echo $$ > "$d/mpirun.pid"
trap '' TERM INT
exec sleep 300
`

// startWedged starts gohorovodrun -np 2 over fakeMPIRun and returns once
// the fake has started its processes.
func startWedged(t *testing.T, fail bool, env ...string) (cmd *exec.Cmd, dir string, stderr *syncBuffer, done chan error) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the launcher follows an MPI job's processes in /proc (Linux)")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	launcher, _ := build(t)
	dir = t.TempDir()
	fake := filepath.Join(dir, "mpirun")
	if err := os.WriteFile(fake, []byte(fakeMPIRun), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(launcher, "--mpi", "--mpi-single-copy", "none", "-np", "2", "/bin/true")
	cmd.Env = append(os.Environ(), EnvMPIRunForTest+"="+fake, "FAKE_DIR="+dir)
	if fail {
		cmd.Env = append(cmd.Env, "FAKE_FAIL=1")
	}
	cmd.Env = append(cmd.Env, env...)
	stderr = &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for _, f := range []string{"stubborn.pid", "mpirun.pid"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				if pid := atoi(strings.TrimSpace(string(b))); pid > 0 && alive(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, e1 := os.Stat(filepath.Join(dir, "stubborn.pid"))
		_, e2 := os.Stat(filepath.Join(dir, "mpirun.pid"))
		if e1 == nil && e2 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fake mpirun did not start its processes in 30 s\nstderr %s", stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the pid files are complete
	return cmd, dir, stderr, done
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// teardownBound is the bound the launcher keeps after the first failure
// or a signal: mpirun's grace (FailureGrace or StopGrace, 3 s), SIGTERM
// and StopGrace (3 s) to SIGKILL, and slack for a loaded machine.
const teardownBound = 9 * time.Second

// waitWedged waits for gohorovodrun to end and for every process of the
// job (the fake mpirun, its stubborn worker) and its shared-memory
// directory to be gone, failing the test if that takes longer than bound
// from since.
func waitWedged(t *testing.T, dir string, stderr *syncBuffer, done chan error, since time.Time, bound time.Duration) error {
	t.Helper()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("gohorovodrun still running 60 s on\nstderr %s", stderr)
	}
	var pids []int
	for _, f := range []string{"stubborn.pid", "mpirun.pid"} {
		b, rerr := os.ReadFile(filepath.Join(dir, f))
		if rerr != nil {
			t.Fatal(rerr)
		}
		pids = append(pids, atoi(strings.TrimSpace(string(b))))
	}
	b, _ := os.ReadFile(filepath.Join(dir, "vader"))
	shm := strings.TrimSpace(string(b))
	if shm == "" {
		t.Errorf("mpirun was given no directory for its shared memory (OMPI_MCA_btl_vader_backing_directory)")
	}
	gone := func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		_, serr := os.Stat(shm)
		return shm == "" || errors.Is(serr, os.ErrNotExist)
	}
	for deadline := time.Now().Add(60 * time.Second); !gone() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(since); took > bound {
		t.Errorf("the job took %v to end, want at most %v\nstderr %s", took.Round(time.Millisecond), bound, stderr)
	} else {
		t.Logf("the job ended %v after the event", took.Round(time.Millisecond))
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("pid %d is still running", p)
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	if _, serr := os.Stat(shm); shm != "" && !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the job's shared-memory directory %s is still there (%v)", shm, serr)
	}
	return err
}

// TestE2EWedgedMPIRunAfterFailure: rank 1 exits 3, and mpirun neither
// reaps it nor stops the others; the launcher ends the job within the
// bound, naming rank 1.
func TestE2EWedgedMPIRunAfterFailure(t *testing.T) {
	t.Parallel()
	_, dir, stderr, done := startWedged(t, true)
	failedAt := time.Now() // rank 1 fails a second after the start: the bound is counted from before that
	err := waitWedged(t, dir, stderr, done, failedAt, teardownBound+time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("gohorovodrun = %v, want exit status 3 (rank 1's)\nstderr %s", err, stderr)
	}
	if s := stderr.String(); !strings.Contains(s, "rank 1") || !strings.Contains(s, "did not end the job") {
		t.Errorf("stderr does not name rank 1 and the teardown:\n%s", s)
	}
}

// TestE2EWedgedMPIRunAfterSuccess: both ranks end well, and mpirun
// neither reaps them nor ends; the launcher stops it within the bound and
// reports success.
func TestE2EWedgedMPIRunAfterSuccess(t *testing.T) {
	t.Parallel()
	_, dir, stderr, done := startWedged(t, false, "FAKE_CLEAN=1")
	err := waitWedged(t, dir, stderr, done, time.Now(), teardownBound+time.Second)
	if err != nil {
		t.Errorf("gohorovodrun = %v, want success\nstderr %s", err, stderr)
	}
	if s := stderr.String(); !strings.Contains(s, "every rank has ended with status 0") {
		t.Errorf("stderr does not say why mpirun was stopped:\n%s", s)
	}
}

// TestE2EWedgedMPIRunSignal: SIGTERM, SIGINT and SIGKILL to the launcher
// while mpirun ignores SIGTERM: the launcher (after SIGKILL, its guard)
// ends everything within the bound.
func TestE2EWedgedMPIRunSignal(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			cmd, dir, stderr, done := startWedged(t, false)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := waitWedged(t, dir, stderr, done, time.Now(), teardownBound)
			var ee *exec.ExitError
			if want := 130; sig != syscall.SIGKILL && (!errors.As(err, &ee) || ee.ExitCode() != want) {
				t.Errorf("gohorovodrun after %v = %v, want exit status %d\nstderr %s", sig, err, want, stderr)
			}
		})
	}
}

// shmDirOf finds, in pid's memory map, the job's directory for Open MPI's
// shared-memory segments ("" if none is mapped).
func shmDirOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if i := strings.Index(line, "/dev/shm/ghv-mpi-"); i >= 0 {
			return filepath.Dir(strings.Fields(line[i:])[0])
		}
	}
	return ""
}

// TestE2EMPIShmCleaned: under the real mpirun, the ranks' vader segments
// live in the job's own directory, which is gone once the job has ended
// by a worker's SIGKILL, or the launcher's SIGTERM or SIGKILL.
func TestE2EMPIShmCleaned(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	for _, c := range []struct {
		name   string
		worker bool
		sig    syscall.Signal
	}{
		{"worker_SIGKILL", true, syscall.SIGKILL},
		{"launcher_SIGTERM", false, syscall.SIGTERM},
		{"launcher_SIGKILL", false, syscall.SIGKILL},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := startTraining(t, 2)
			rank := j.rankPID(t, 1)
			shm := shmDirOf(t, rank)
			if shm == "" {
				t.Fatalf("rank 1 maps no segment in a ghv-mpi-* directory of /dev/shm")
			}
			pid := j.cmd.Process.Pid
			if c.worker {
				pid = rank
			}
			if err := syscall.Kill(pid, c.sig); err != nil {
				t.Fatal(err)
			}
			since := time.Now()
			select {
			case <-j.done:
			case <-time.After(60 * time.Second):
				t.Fatalf("gohorovodrun still running 60 s after %s\nstderr %s", c.name, j.stderr)
			}
			for deadline := time.Now().Add(teardownBound); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(shm); errors.Is(err, os.ErrNotExist) {
					break
				}
			}
			if _, err := os.Stat(shm); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there %v after %s", shm, time.Since(since).Round(time.Millisecond), c.name)
			}
			if left := waitJobGone(killDeadline); len(left) > 0 {
				t.Errorf("left running: %v", left)
			}
		})
	}
}
