package launch_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// transport is one way the liveness tests launch their workers.
type transport struct {
	name   string
	worker string
	args   []string // the launcher's flags for it
}

// transports are MPI (the -tags mpi worker under mpirun) and the embedded
// transport (the plain worker under --gloo).
func transports(plain string) []transport {
	return []transport{
		{"mpi", filepath.Join(binDir, "worker-mpi"), nil},
		{"gloo", plain, []string{"--gloo"}},
	}
}

// skipIfMissing skips the MPI case where mpirun or the MPI worker is absent.
func (tc transport) skipIfMissing(t *testing.T) {
	t.Helper()
	if tc.name != "mpi" {
		return
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not on PATH")
	}
	if _, err := os.Stat(tc.worker); err != nil {
		t.Skip("no -tags mpi worker")
	}
}

// frozenTimeout is the heartbeat timeout of the frozen-rank tests.
const frozenTimeout = 3 * time.Second

// TestE2EFrozenRank stops one rank of a training job with SIGSTOP, on both
// transports: the rank is alive, its connections stay open, and only the
// heartbeat channel can tell. The job must end non-zero within the
// heartbeat timeout plus 10 s, with every other rank naming the frozen
// one, and leave no process behind.
func TestE2EFrozenRank(t *testing.T) {
	launcher, plain := build(t)
	t.Parallel()
	for _, tc := range transports(plain) {
		for _, np := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s_np%d", tc.name, np), func(t *testing.T) {
				tc.skipIfMissing(t)
				t.Parallel()
				frozenJob(t, launcher, tc.worker, tc.args, np, np-1)
			})
		}
	}
}

func frozenJob(t *testing.T, launcher, worker string, flags []string, np, victim int) {
	dir := t.TempDir()
	args := append(append([]string{}, flags...), "-np", strconv.Itoa(np),
		"--heartbeat-timeout-seconds", strconv.Itoa(int(frozenTimeout.Seconds())), worker, "train", dir)
	j := &trainingJob{dir: dir, cmd: exec.Command(launcher, args...)}
	var pids []int
	j.startReady(t, np, "training ", nil, 90*time.Second, func() {
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		j.cmd.Process.Kill()
	})
	stderr, done := j.stderr, j.done
	pids = readPIDs(t, dir)
	b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(victim)+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	bound := frozenTimeout + 10*time.Second
	select {
	case err = <-done:
	case <-time.After(bound + 30*time.Second):
		t.Fatalf("gohorovodrun still running %v after rank %d was stopped\nstderr %s", time.Since(stopped), victim, stderr)
	}
	took := time.Since(stopped)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Errorf("gohorovodrun = %v, want a non-zero exit", err)
	}
	if took > bound {
		t.Errorf("the job ended %v after rank %d was stopped, want within %v", took.Round(time.Millisecond), victim, bound)
	}
	t.Logf("np %d: stopped rank %d; the job ended %v later", np, victim, took.Round(time.Millisecond))
	if testing.Verbose() {
		t.Logf("stderr:\n%s", stderr)
	}
	out := stderr.String()
	want := fmt.Sprintf("rank %d (host ", victim)
	// Under mpirun the first rank to end the job may end the others before
	// they print their line: at least one rank must have named the frozen
	// one, with its host.
	if !strings.Contains(out, want) || !strings.Contains(out, "froze") {
		t.Errorf("stderr does not name rank %d as frozen (%q ... froze):\n%s", victim, want, out)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	assertGone(t, pids)
}

// TestE2EStallShutdownWithSleepingRank: rank 1 sleeps in user code for
// five minutes (alive: its heartbeats go on) while the others wait in an
// allreduce. The stall inspector's shutdown must end the job within the
// shutdown time plus 10 s on both transports, MPI included, where the
// others must not wait in MPI_Finalize for a rank that is not coming.
func TestE2EStallShutdownWithSleepingRank(t *testing.T) {
	launcher, plain := build(t)
	for _, tc := range transports(plain) {
		t.Run(tc.name, func(t *testing.T) {
			tc.skipIfMissing(t)
			const shutdown = 3 * time.Second
			args := append(append([]string{}, tc.args...), "-np", "3", "--stall-check-warning-time-seconds", "1",
				"--stall-check-shutdown-time-seconds", strconv.Itoa(int(shutdown.Seconds())), tc.worker, "sleepy", "300")
			cmd := exec.Command(launcher, args...)
			stderr := &syncBuffer{}
			cmd.Stderr = stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); killJob(t) })
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(90 * time.Second):
				t.Fatalf("gohorovodrun still running after 90 s\nstderr %s", stderr)
			}
			took := time.Since(start)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("gohorovodrun = %v, want a non-zero exit\nstderr %s", err, stderr)
			}
			// Start-up on a loaded machine counts in took: allow for it.
			if bound := shutdown + 10*time.Second + 10*time.Second; took > bound {
				t.Errorf("the job took %v, want within %v (shutdown %v + 10 s, + 10 s of start-up)\nstderr %s", took, bound, shutdown, stderr)
			}
			if !strings.Contains(stderr.String(), "Will shutdown") {
				t.Errorf("stderr lacks the stall shutdown:\n%s", stderr)
			}
			t.Logf("%s: the job ended %v after it started", tc.name, took.Round(time.Millisecond))
		})
	}
}

// TestE2ESlowRankIsNotFrozen: rank 1 sleeps in user code for longer than
// the heartbeat timeout before its first collective (a slow data loader):
// its heartbeats go on, so it is not declared frozen, and the job succeeds
// on both transports.
func TestE2ESlowRankIsNotFrozen(t *testing.T) {
	launcher, plain := build(t)
	t.Parallel()
	for _, tc := range transports(plain) {
		t.Run(tc.name, func(t *testing.T) {
			tc.skipIfMissing(t)
			t.Parallel()
			args := append(append([]string{}, tc.args...), "-np", "2", "--heartbeat-timeout-seconds", "2", tc.worker, "sleepy", "6")
			cmd := exec.Command(launcher, args...)
			stderr := &syncBuffer{}
			cmd.Stderr = stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("gohorovodrun = %v, want success: a rank asleep in user code is not frozen\nstderr %s", err, stderr)
			}
			if strings.Contains(stderr.String(), "froze") {
				t.Errorf("a sleeping rank was declared frozen:\n%s", stderr)
			}
		})
	}
}
