package launch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2ETorchrunRestartResumes: torch's own torchrun, with
// --max_restarts 1, runs examples/mnist with --checkpoint-dir on 2
// workers; once the checkpoint of step 70 (epoch 2) is written, one worker
// is SIGKILLed: the agent stops the other and restarts both, which resume
// from the checkpoint instead of step 0 and end with the parameters of an
// uninterrupted run, bit for bit.
func TestE2ETorchrunRestartResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	run := torchrun(t)
	t.Parallel()
	j, whole := embeddedResume(t)
	dir := j.dir

	ckpt := t.TempDir()
	mnist := filepath.Join(dir, "mnist")
	args := append([]string{"--nnodes", "1", "--nproc_per_node", "2", "--max_restarts", "1", "--master_addr", "127.0.0.1",
		"--master_port", freePort(t), "--no_python", mnist, "--checkpoint-dir", ckpt}, resumeArgs...)
	cmd := exec.Command(run[0], append(run[1:], args...)...)
	cmd.Env = foreignEnv(t, "GOHOROVOD_KEY_FILE="+filepath.Join(t.TempDir(), "key"))
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t.Cleanup(func() {
		for pid := range processesMentioning(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	done := startGroup(t, cmd)
	waitFor(t, 3*time.Minute, "checkpoint of step 70", os.DevNull, func() bool {
		_, err := os.Stat(filepath.Join(ckpt, "ckpt-000000000070.ghv"))
		return err == nil
	})
	victim := 0
	for pid, cmdline := range processesMentioning(dir) {
		if strings.HasPrefix(cmdline, mnist) {
			victim = pid
			break
		}
	}
	if victim == 0 || syscall.Kill(victim, syscall.SIGKILL) != nil {
		t.Fatalf("no worker to kill among %v\n%s", processesMentioning(dir), out.String())
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("torchrun still running 3 minutes after a worker was killed:\n%s", out.String())
	}
	log := out.String()
	t.Logf("torchrun's output:\n%s", log)
	if err != nil {
		t.Fatalf("torchrun: %v", err)
	}
	if n := strings.Count(log, "mnist: resumable, 2 ranks"); n != 2 {
		t.Fatalf("%d starts of the workers, want 2 (one restart)", n)
	}
	m := regexp.MustCompile(`resumed from step ([0-9]+) \(epoch 2\)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatal("the restarted workers did not resume in epoch 2")
	}
	if step, _ := strconv.Atoi(m[1]); step < 70 || step > 94 {
		t.Fatalf("resumed from step %d, want one of epoch 2 from 70 on", step)
	}
	if got, want := finalHash.FindString(log), finalHash.FindString(whole); got != want {
		t.Fatalf("the restarted workers ended with %q, an uninterrupted run with %q", got, want)
	}
}
