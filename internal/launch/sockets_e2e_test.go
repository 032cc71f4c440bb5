package launch_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestE2EGlooSocketsCleaned: a --gloo job's Unix sockets live in a
// directory of the job's own (mode 0700) under $XDG_RUNTIME_DIR, and
// whichever way the job ends (SIGINT, SIGTERM or SIGKILL of the launcher,
// SIGTERM or SIGKILL of a worker) neither a socket file nor a process of
// the job remains.
func TestE2EGlooSocketsCleaned(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	launcher, worker := build(t)
	cases := []struct {
		name   string
		worker bool // signal rank 1, else the launcher
		sig    syscall.Signal
	}{
		{"launcher_SIGINT", false, syscall.SIGINT},
		{"launcher_SIGTERM", false, syscall.SIGTERM},
		{"launcher_SIGKILL", false, syscall.SIGKILL},
		{"worker_SIGTERM", true, syscall.SIGTERM},
		{"worker_SIGKILL", true, syscall.SIGKILL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt, err := os.MkdirTemp("", "ghvrt") // short: socket paths have at most 107 bytes
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(rt)
			dir := t.TempDir()
			j := &trainingJob{dir: dir, cmd: exec.Command(launcher, "--gloo", "-np", "2", worker, "train", dir)}
			j.cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+rt)
			j.startReady(t, 2, "training ", nil, 60*time.Second, nil)
			cmd, stderr, done := j.cmd, j.stderr, j.done
			socks, _ := filepath.Glob(filepath.Join(rt, "ghv-*", "*.sock"))
			if len(socks) != 2 {
				t.Fatalf("found sockets %v under $XDG_RUNTIME_DIR, want 2 in the job's directory", socks)
			}
			st, err := os.Stat(filepath.Dir(socks[0]))
			if err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("the job's socket directory: %v, mode %v; want 0700", err, st.Mode().Perm())
			}
			if _, err := os.Stat(filepath.Join(os.TempDir(), filepath.Base(socks[0]))); err == nil {
				t.Errorf("a socket %s is in %s", filepath.Base(socks[0]), os.TempDir())
			}
			pid := cmd.Process.Pid
			if c.worker {
				pid = (&trainingJob{dir: dir}).rankPID(t, 1)
			}
			if err := syscall.Kill(pid, c.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("gohorovodrun still running 60 s after %s\nstderr %s", c.name, stderr)
			}
			if left := waitJobGone(killDeadline); len(left) > 0 {
				t.Errorf("left running: %v", left)
			}
			var ents []os.DirEntry
			for deadline := time.Now().Add(killDeadline); ; time.Sleep(20 * time.Millisecond) {
				ents, _ = os.ReadDir(rt)
				if len(ents) == 0 || time.Now().After(deadline) {
					break
				}
			}
			for _, e := range ents {
				left, _ := filepath.Glob(filepath.Join(rt, e.Name(), "*"))
				t.Errorf("left in $XDG_RUNTIME_DIR: %s %v", e.Name(), left)
			}
		})
	}
}

// TestE2EElasticSocketsCleaned: an elastic job's socket directory goes
// when its launcher is killed (its guard removes it) or stopped, and its
// workers with it.
func TestE2EElasticSocketsCleaned(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	launcher, worker := build(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			rt, err := os.MkdirTemp("", "ghvrt")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(rt)
			cmd := exec.Command(launcher, "-np", "2", "--min-np", "1", "-H", "localhost:2", worker, "elastic",
				"-epochs", "1000", "-sleep", "50ms")
			cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+rt)
			stderr := &syncBuffer{}
			cmd.Stderr = stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cmd.Process.Kill()
				killJob(t)
			})
			go func() { _, _ = bufio.NewReader(stdout).WriteTo(discard{}) }()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if socks, _ := filepath.Glob(filepath.Join(rt, "ghv-*", "*.sock")); len(socks) == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no two sockets in the job's directory after 60 s\nstderr %s", stderr)
				}
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("gohorovodrun still running 60 s after %v", sig)
			}
			if left := waitJobGone(killDeadline); len(left) > 0 {
				t.Errorf("left running: %v", left)
			}
			var ents []os.DirEntry
			for deadline := time.Now().Add(killDeadline); ; time.Sleep(20 * time.Millisecond) {
				if ents, _ = os.ReadDir(rt); len(ents) == 0 || time.Now().After(deadline) {
					break
				}
			}
			for _, e := range ents {
				t.Errorf("left in $XDG_RUNTIME_DIR: %s", e.Name())
			}
		})
	}
}
