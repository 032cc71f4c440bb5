package launch_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestE2ESlurmRequeueResumes: `sbatch --requeue` runs examples/mnist with
// --checkpoint-dir under gohorovodrun (embedded transport, np 2); once it
// has written the checkpoint of step 70, in epoch 2, `scontrol requeue`
// kills it and puts it back in the queue. The requeued run (SLURM counts
// Restarts=1) resumes from the checkpoint, trains only the rest, and ends
// with the parameters of an uninterrupted run, bit for bit.
func TestE2ESlurmRequeueResumes(t *testing.T) {
	slurm(t)
	// Not in parallel with other tests: the requeue must stop the job
	// in epoch 2, and a loaded slurmctld acts later.
	j, whole := embeddedResume(t)
	dir := j.dir

	ckpt, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	job := strings.Join(append([]string{filepath.Join(dir, "gohorovodrun"), "--gloo", "-np", "2", filepath.Join(dir, "mnist"),
		"--checkpoint-dir", ckpt}, resumeArgs...), " ")
	cmd := exec.Command("sbatch", "--parsable", "--requeue", "--open-mode=append", "-n", "2", "-o", out, "--wrap", job)
	cmd.Env = slurmEnv(t)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, b)
	}
	id := strings.TrimSpace(strings.Split(string(b), ";")[0])
	t.Cleanup(func() { exec.Command("scancel", id).Run() })
	waitFor(t, 3*time.Minute, "the checkpoint of step 70", out, func() bool {
		_, err := os.Stat(filepath.Join(ckpt, "ckpt-000000000070.ghv"))
		return err == nil
	})
	if b, err := exec.Command("scontrol", "requeue", id).CombinedOutput(); err != nil {
		t.Fatalf("scontrol requeue %s: %v\n%s", id, err, b)
	}
	releaseRequeued(t, id, out, dir)
	var show string
	waitFor(t, 5*time.Minute, "the requeued job to complete", out, func() bool {
		b, _ := exec.Command("scontrol", "show", "job", id).Output()
		show = string(b)
		return strings.Contains(show, "JobState=COMPLETED") || strings.Contains(show, "JobState=FAILED")
	})
	log, _ := os.ReadFile(out)
	t.Logf("scontrol show job:\n%s\njob output:\n%s", show, log)
	if !strings.Contains(show, "JobState=COMPLETED") || !strings.Contains(show, "Restarts=1") {
		t.Fatalf("the job did not complete after one restart:\n%s", show)
	}
	if n := strings.Count(string(log), "mnist: resumable, 2 ranks"); n != 2 {
		t.Fatalf("%d runs in the job's output, want 2", n)
	}
	m := regexp.MustCompile(`resumed from step ([0-9]+) \(epoch 2\)`).FindSubmatch(log)
	if m == nil {
		t.Fatal("the requeued run did not resume in epoch 2")
	}
	if step, _ := strconv.Atoi(string(m[1])); step < 70 || step > 94 {
		t.Fatalf("resumed from step %d, want one of epoch 2 from 70 on", step)
	}
	if got, want := finalHash.FindString(string(log)), finalHash.FindString(whole); got != want {
		t.Fatalf("the requeued job ended with %q, an uninterrupted run with %q", got, want)
	}
}

// releaseRequeued makes the requeued job id eligible at once. SLURM makes a
// requeued batch job eligible again only after about two minutes; the
// test need not wait for that, once the job is back in the queue and its
// first run is over: every process mentioning dir gone (with
// optim/preempt, the first run stops after a checkpoint, not at once) and
// the node done with the job. slurmd revokes the old run's credential
// with a time in whole seconds, and refuses a new credential of that same
// second ("Job credential revoked", the job then FAILED): the release
// waits for the next second.
func releaseRequeued(t *testing.T, id, out, dir string) {
	t.Helper()
	waitFor(t, time.Minute, "the job pending again", out, func() bool {
		b, _ := exec.Command("scontrol", "show", "job", id).Output()
		return strings.Contains(string(b), "JobState=PENDING")
	})
	if left := waitMentioningGone(dir, time.Minute); len(left) > 0 {
		t.Fatalf("the first run still runs a minute after the requeue: %v", left)
	}
	waitFor(t, time.Minute, "the node done with the first run", out, func() bool {
		b, _ := exec.Command("scontrol", "show", "node").Output()
		return !strings.Contains(string(b), "COMPLETING")
	})
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	if b, err := exec.Command("scontrol", "update", "JobId="+id, "StartTime=now").CombinedOutput(); err != nil {
		t.Logf("scontrol update JobId=%s StartTime=now: %v\n%s (the requeued job waits out SLURM's delay)", id, err, b)
	}
}

// waitFor polls done every 100 ms for up to d, failing the test (with the
// job's output file) when it stays false.
func waitFor(t *testing.T, d time.Duration, what, out string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !done() {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out)
			t.Fatalf("no %s after %v; the job's output:\n%s", what, d, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
