package launch_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The embedded transport's end-to-end tests: gohorovodrun
// --gloo with the test worker's rendezvous modes, which join the
// rendezvous through internal/job/rendezvous and need no transport. They
// need no mpirun.

// assignment is one worker's printed assignment.
type assignment struct {
	rank, size, local, localSize, cross, crossSize int
	members                                        string
}

func parseAssignments(t *testing.T, out string) map[int]assignment {
	t.Helper()
	got := map[int]assignment{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		tag, body, ok := strings.Cut(line, "<stdout>:")
		var a assignment
		_, err := fmt.Sscanf(body, "rank %d size %d local %d/%d cross %d/%d members %s",
			&a.rank, &a.size, &a.local, &a.localSize, &a.cross, &a.crossSize, &a.members)
		if !ok || err != nil || tag != fmt.Sprintf("[1,%d]", a.rank) {
			t.Fatalf("unexpected output line %q (%v)", line, err)
		}
		got[a.rank] = a
	}
	return got
}

func TestE2EGlooAssignments(t *testing.T) {
	launcher, worker := build(t)
	for _, tc := range []struct {
		name string
		args []string
		want []assignment // members left out
	}{
		{"local_np3", []string{"-np", "3"}, []assignment{{0, 3, 0, 3, 0, 1, ""}, {1, 3, 1, 3, 0, 1, ""}, {2, 3, 2, 3, 0, 1, ""}}},
		// Horovod's heterogeneous example, with two names for this machine.
		{"heterogeneous", []string{"-np", "3", "-H", "127.0.0.1:1,localhost:2"},
			[]assignment{{0, 3, 0, 1, 0, 2, ""}, {1, 3, 0, 2, 1, 2, ""}, {2, 3, 1, 2, 0, 1, ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(launcher, append(append([]string{"--gloo"}, tc.args...), worker, "rdzv")...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("gohorovodrun: %v\nstdout %s\nstderr %s", err, out, stderr.String())
			}
			got := parseAssignments(t, string(out))
			if len(got) != len(tc.want) {
				t.Fatalf("heard from %d ranks, want %d:\n%s", len(got), len(tc.want), out)
			}
			for _, w := range tc.want {
				g := got[w.rank]
				if g.members != got[0].members || strings.Count(g.members, ":pid") != len(tc.want) {
					t.Errorf("rank %d members %q, rank 0's %q", w.rank, g.members, got[0].members)
				}
				g.members = ""
				if g != w {
					t.Errorf("rank %d: got %+v, want %+v", w.rank, g, w)
				}
			}
		})
	}
}

// TestE2EGlooWithoutMPIRun: with no mpirun on PATH the launcher picks the
// embedded transport by itself, and says so once.
func TestE2EGlooWithoutMPIRun(t *testing.T) {
	launcher, worker := build(t)
	cmd := exec.Command(launcher, "-np", "2", worker, "rdzv")
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gohorovodrun: %v\nstderr %s", err, stderr.String())
	}
	if n := len(parseAssignments(t, string(out))); n != 2 {
		t.Errorf("%d ranks", n)
	}
	const want = "gohorovodrun: mpirun not found on PATH: running the workers on the embedded transport (--gloo)\n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
}

func TestE2EGlooFailingRank(t *testing.T) {
	launcher, worker := build(t)
	dir := t.TempDir()
	cmd := exec.Command(launcher, "--gloo", "-np", "3", worker, "fail", "2", "3", dir)
	stderr := runWant(t, cmd, 3)
	want := "gohorovodrun: rank 2 exited with status 3; the other workers were stopped. Its last error output: worker 2: failing with 3\n"
	if !strings.HasSuffix(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	pids := readPIDs(t, dir)
	if len(pids) != 2 {
		t.Errorf("%d other ranks started, want 2", len(pids))
	}
	assertGone(t, pids)
}

// TestE2EGlooNeverJoins: rank 1 never joins the rendezvous; after
// --gloo-timeout-seconds the job ends naming its host and local rank. The
// timeout leaves the other workers time to start and join on a loaded
// 2-core machine (at 2 s a slow start was reported missing too).
func TestE2EGlooNeverJoins(t *testing.T) {
	launcher, worker := build(t)
	dir := t.TempDir()
	cmd := exec.Command(launcher, "--gloo", "--gloo-timeout-seconds", "5", "-np", "3", worker, "rdzv-hang", dir, "1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("gohorovodrun = %v, want exit status 1\nstderr %s", err, stderr.String())
	}
	// The host is localhost, or the allocation's node where the test
	// runs inside one (the launcher then takes its hosts from SLURM).
	want := regexp.MustCompile(`gohorovodrun: rendezvous timed out after 5s \(--gloo-timeout-seconds, HOROVOD_GLOO_TIMEOUT_SECONDS\): ` +
		`host \S+ local rank 1 never arrived; the other workers were stopped\n$`)
	if !want.MatchString(stderr.String()) {
		t.Errorf("stderr does not end with a match of %q:\n%s", want, stderr.String())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %v", took)
	}
	assertGone(t, readPIDs(t, dir))
}

// startGlooJob starts `gohorovodrun --gloo -np np worker rdzv-hang DIR -1`
// and returns once every rank is ready.
func startGlooJob(t *testing.T, np int) *trainingJob {
	t.Helper()
	return startGlooMode(t, np, "ready ", "rdzv-hang", "-1")
}

// startGlooMode starts `gohorovodrun --gloo -np np worker MODE DIR ARGS...`
// and returns once np lines of output contain ready.
func startGlooMode(t *testing.T, np int, ready, mode string, args ...string) *trainingJob {
	t.Helper()
	launcher, worker := build(t)
	j := &trainingJob{dir: t.TempDir()}
	j.cmd = exec.Command(launcher, append([]string{"--gloo", "-np", strconv.Itoa(np), worker, mode, j.dir}, args...)...)
	j.startReady(t, np, ready, nil, 60*time.Second, nil)
	return j
}

// TestE2EGlooKillRank: SIGKILL of one worker, waiting after the
// rendezvous or in the middle of ring-shift exchanges (hvd.Exchange, as
// decentralized SGD makes them), ends the job within killDeadline, naming
// the rank and the signal, with nothing left.
func TestE2EGlooKillRank(t *testing.T) {
	t.Run("waiting", func(t *testing.T) { glooKillRank(t, startGlooJob(t, 3)) })
	t.Run("exchanging", func(t *testing.T) { glooKillRank(t, startGlooMode(t, 3, "training ", "train-exchange")) })
}

func glooKillRank(t *testing.T, j *trainingJob) {
	victim, err := j.killRank(t, 1)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 137 {
		t.Errorf("gohorovodrun = %v, want exit status 137", err)
	}
	want := fmt.Sprintf("gohorovodrun: rank 1 (pid %d) was killed by signal 9 (SIGKILL); the other workers were stopped", victim)
	if !strings.Contains(j.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, j.stderr)
	}
	if left := waitJobGone(5 * time.Second); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}

// TestE2EGlooKillLauncher: SIGKILL of the launcher; its guard stops the
// workers (these do not run the runtime's own launcher watch).
func TestE2EGlooKillLauncher(t *testing.T) {
	j := startGlooJob(t, 3)
	if err := syscall.Kill(j.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-j.done
	left := waitJobGone(60 * time.Second)
	if len(left) > 0 {
		t.Fatalf("still running 60 s after the kill: %v", left)
	}
	if took := time.Since(killed); took > killDeadline {
		t.Errorf("the job outlived its launcher by %v, want at most %v", took, killDeadline)
	}
}

// TestE2EGlooSignal: SIGTERM (or Ctrl-C) to the launcher stops every
// worker; the launcher exits with 130.
func TestE2EGlooSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			j := startGlooJob(t, 2)
			pids := readPIDs(t, j.dir)
			if err := j.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-j.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("gohorovodrun still running 30 s after %v", sig)
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Errorf("gohorovodrun = %v, want exit status 130\nstderr %s", err, j.stderr)
			}
			assertGone(t, pids)
		})
	}
}
