package launch_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The kill tests: SIGKILL one rank, or the launcher itself, in
// the middle of training at np 4 under the real mpirun, and check that the
// job ends promptly and leaves no process behind.

// killDeadline bounds the time from a SIGKILL to the end of the launcher
// (rank killed) or of the last process of the job (launcher killed).
const killDeadline = 10 * time.Second

// trainingJob is gohorovodrun running testdata/worker's train mode.
type trainingJob struct {
	cmd    *exec.Cmd
	dir    string // the workers' pid files
	stderr *syncBuffer
	done   chan error // cmd.Wait's result
}

// startTraining starts `gohorovodrun -np np worker-mpi train DIR` and
// returns once every rank has trained a few steps.
func startTraining(t *testing.T, np int) *trainingJob {
	t.Helper()
	return startTrainingMode(t, np, "train")
}

// startTrainingMode is startTraining with the worker's mode: train
// (allreduces) or train-exchange (ring shifts with hvd.Exchange).
func startTrainingMode(t *testing.T, np int, mode string) *trainingJob {
	t.Helper()
	_, _ = binaries(t)
	worker := mpiWorker(t)
	return startJob(t, np, worker, mode, "training ")
}

// startJob starts `gohorovodrun -np np WORKER MODE DIR` and returns once
// np lines of output contain ready. Start-up on a busy machine is slow:
// the wait for it is generous.
func startJob(t *testing.T, np int, worker, mode, ready string) *trainingJob {
	t.Helper()
	return startJobWith(t, np, ready, nil, func(dir string) []string {
		return []string{"-np", strconv.Itoa(np), worker, mode, dir}
	})
}

// startJobWith starts gohorovodrun with the arguments args gives for the
// job's directory, copies its standard output to tee (when not nil), and
// returns once np lines of it contain ready.
func startJobWith(t *testing.T, np int, ready string, tee io.Writer, args func(dir string) []string) *trainingJob {
	t.Helper()
	launcher, _ := binaries(t)
	j := &trainingJob{dir: t.TempDir()}
	j.cmd = exec.Command(launcher, args(j.dir)...)
	j.startReady(t, np, ready, tee, 90*time.Second, nil)
	return j
}

// startReady starts j.cmd, its standard error kept in j.stderr and its
// end sent to j.done, with cleanup run at the end of the test (nil:
// SIGKILL for the launcher and whatever of the job is left); it returns
// once n lines of the standard output (copied to tee when not nil)
// contain ready, and fails the test when the launcher ends first or the
// lines take longer than within.
func (j *trainingJob) startReady(t *testing.T, n int, ready string, tee io.Writer, within time.Duration, cleanup func()) {
	t.Helper()
	j.stderr, j.done = &syncBuffer{}, make(chan error, 1)
	j.cmd.Stderr = j.stderr
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if cleanup == nil {
		cleanup = func() {
			j.cmd.Process.Kill()
			killJob(t)
		}
	}
	t.Cleanup(cleanup)
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for seen := 0; sc.Scan(); {
			if tee != nil {
				fmt.Fprintln(tee, sc.Text())
			}
			if strings.Contains(sc.Text(), ready) {
				if seen++; seen == n {
					close(up)
				}
			}
		}
	}()
	go func() { j.done <- j.cmd.Wait() }()
	select {
	case <-up:
	case err := <-j.done:
		t.Fatalf("gohorovodrun ended before %q: %v\nstderr %s", ready, err, j.stderr)
	case <-time.After(within):
		t.Fatalf("the ranks were not %q after %v\nstderr %s", ready, within, j.stderr)
	}
}

// startIn starts cmd, a job whose processes mention dir, and returns the
// channel of its end; whatever of the job is left at the end of the test
// is killed.
func startIn(t *testing.T, cmd *exec.Cmd, dir string) chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		for pid := range processesMentioning(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return done
}

// startGroup starts cmd in a process group of its own, which is killed
// at the end of the test, and returns the channel of its end.
func startGroup(t *testing.T, cmd *exec.Cmd) chan error {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return done
}

// mpiWorker is the test worker built with -tags mpi; the test is skipped
// where it could not be built.
func mpiWorker(t *testing.T) string {
	t.Helper()
	worker := filepath.Join(binDir, "worker-mpi")
	if _, err := os.Stat(worker); err != nil {
		t.Skip("mpicc not on PATH or cgo disabled: no -tags mpi worker (make deps installs Open MPI)")
	}
	return worker
}

// killRank SIGKILLs rank and waits for the launcher's end, which must
// come within killDeadline; it returns the rank's pid and the launcher's
// Wait error.
func (j *trainingJob) killRank(t *testing.T, rank int) (int, error) {
	t.Helper()
	victim := j.rankPID(t, rank)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var err error
	select {
	case err = <-j.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("gohorovodrun still running 60 s after rank %d was killed\nstderr %s", rank, j.stderr)
	}
	took := time.Since(killed)
	t.Logf("SIGKILL of rank %d (pid %d) to gohorovodrun's exit: %v", rank, victim, took.Round(time.Millisecond))
	if took > killDeadline {
		t.Errorf("gohorovodrun took %v to end after rank %d was killed, want at most %v", took, rank, killDeadline)
	}
	return victim, err
}

// rankPID reads the pid that rank wrote.
func (j *trainingJob) rankPID(t *testing.T, rank int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(j.dir, strconv.Itoa(rank)+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestE2EKillRank SIGKILLs rank 2 of 4 while the job trains, with
// allreduces or in the middle of ring-shift exchanges (hvd.Exchange, as
// decentralized SGD makes them): the launcher must end within
// killDeadline, with a non-zero status and a message that names the rank
// and the signal, and nothing of the job may be left.
func TestE2EKillRank(t *testing.T) {
	for _, mode := range []string{"train", "train-exchange"} {
		t.Run(mode, func(t *testing.T) { killRank(t, startTrainingMode(t, 4, mode)) })
	}
}

func killRank(t *testing.T, j *trainingJob) {
	_, err := j.killRank(t, 2)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("gohorovodrun = %v, want a non-zero exit status", err)
	}
	// "(on host localhost)", or "(pid P on host vm)" where mpirun's own
	// report names the pid (as inside a SLURM allocation).
	want := "gohorovodrun: rank 2 ("
	for _, w := range []string{want, "on host ", "was killed by signal 9 (SIGKILL); the other workers were stopped"} {
		if !strings.Contains(j.stderr.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, j.stderr)
		}
	}
	if left := waitJobGone(5 * time.Second); len(left) > 0 {
		t.Errorf("left running after the job ended: %v", left)
	}
}

// TestE2EKillLauncher SIGKILLs gohorovodrun itself while the job trains:
// nothing can clean up from inside it. The guard it started beside mpirun
// stops mpirun, which stops the workers ("launcher"). With the guard
// killed too ("launcher_and_guard"), the workers notice on their own that
// the launcher is gone (runtime/internal/transport/guard.go) and exit, and mpirun with them.
// Workers that do not use the runtime ("launcher_plain_workers", the
// non-MPI worker waiting in a sleep) have only the guard. In every case no
// process of the job may outlive the launcher by more than killDeadline.
func TestE2EKillLauncher(t *testing.T) {
	for _, tc := range []struct {
		name      string
		alsoGuard bool
		plain     bool
	}{{"launcher", false, false}, {"launcher_and_guard", true, false}, {"launcher_plain_workers", false, true}} {
		name, alsoGuard := tc.name, tc.alsoGuard
		t.Run(name, func(t *testing.T) {
			var j *trainingJob
			if tc.plain {
				_, worker := binaries(t)
				j = startJob(t, 4, worker, "hang", "ready ")
			} else {
				j = startTraining(t, 4)
			}
			victims := []int{j.cmd.Process.Pid}
			procs := jobProcesses()
			if alsoGuard {
				g := guardOf(procs, j.cmd.Process.Pid)
				if g == 0 {
					t.Fatalf("no guard among the job's processes %v", procs)
				}
				victims = append(victims, g)
			}
			for _, p := range victims {
				if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			killed := time.Now()
			<-j.done // reap the launcher: a zombie counts as gone anyway
			left := waitJobGone(60 * time.Second)
			took := time.Since(killed)
			t.Logf("SIGKILL of %s (pids %v) to the last of the job's %d other processes gone: %v",
				name, victims, len(procs)-len(victims), took.Round(time.Millisecond))
			if len(left) > 0 {
				t.Fatalf("still running 60 s after the kill: %v", left)
			}
			if took > killDeadline {
				t.Errorf("the job outlived its launcher by %v, want at most %v", took, killDeadline)
			}
		})
	}
}

// jobProcesses lists the running (not zombie) processes whose command
// line mentions the test binaries' directory: launchers, guards, mpirun
// (its argv holds the worker's path) and workers. binDir is unique to this
// test run, so other users' jobs on the machine are never counted.
func jobProcesses() map[int]string { return processesMentioning(binDir) }

// processesMentioning lists the running (not zombie) processes other than
// this one whose command line mentions dir (none if dir is empty).
func processesMentioning(dir string) map[int]string {
	out := map[int]string{}
	if dir == "" {
		return out
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(b, []byte(dir)) || !alive(pid) {
			continue
		}
		out[pid] = strings.Join(strings.Fields(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))), " ")
	}
	return out
}

// guardOf finds the guard: the gohorovodrun process with no arguments
// whose parent is the launcher.
func guardOf(procs map[int]string, launcher int) int {
	for pid, cmdline := range procs {
		if filepath.Base(cmdline) != "gohorovodrun" {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(launcher) {
			return pid
		}
	}
	return 0
}

// waitJobGone waits up to d for every process of the job to end, and
// returns those still running.
func waitJobGone(d time.Duration) map[int]string { return waitMentioningGone(binDir, d) }

// waitMentioningGone waits up to d for every process whose command line
// mentions dir to end, and returns those still running.
func waitMentioningGone(dir string, d time.Duration) map[int]string {
	deadline := time.Now().Add(d)
	for {
		left := processesMentioning(dir)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killJob SIGKILLs whatever a failed test left behind.
func killJob(t *testing.T) {
	for pid, cmdline := range jobProcesses() {
		t.Logf("killing leftover %d: %s", pid, cmdline)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer (exec's copying
// goroutine) and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
