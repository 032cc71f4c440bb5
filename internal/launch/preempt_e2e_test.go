package launch_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/launch"
	"github.com/gohorovod/gohorovod/internal/preempt"
)

// preemptJob is gohorovodrun running testdata/worker's preempt mode.
type preemptJob struct {
	trainingJob
	np     int
	stdout *syncBuffer
}

// startPreempt starts `gohorovodrun -np NP FLAGS WORKER preempt DIR` and
// returns once every rank has trained a few steps.
func startPreempt(t *testing.T, np int, worker string, flags ...string) *preemptJob {
	t.Helper()
	out := &syncBuffer{}
	j := startJobWith(t, np, "training ", out, func(dir string) []string {
		return append(append([]string{"-np", strconv.Itoa(np)}, flags...), worker, "preempt", dir)
	})
	return &preemptJob{trainingJob: *j, np: np, stdout: out}
}

// wait returns gohorovodrun's exit status, failing after d.
func (j *preemptJob) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case err := <-j.done:
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		}
		t.Fatalf("gohorovodrun: %v", err)
	case <-time.After(d):
		t.Fatalf("gohorovodrun still running %v after the signal\nstderr %s", d, j.stderr)
	}
	return -1
}

// checkStoppedTogether checks that every rank checkpointed and stopped
// after the same step.
func (j *preemptJob) checkStoppedTogether(t *testing.T) {
	t.Helper()
	step := ""
	for r := 0; r < j.np; r++ {
		b, err := os.ReadFile(filepath.Join(j.dir, strconv.Itoa(r)+".ckpt"))
		if err != nil {
			t.Errorf("rank %d wrote no checkpoint: %v\nstdout %s\nstderr %s", r, err, j.stdout, j.stderr)
			continue
		}
		if step == "" {
			step = string(b)
		}
		if string(b) != step {
			t.Errorf("rank %d checkpointed step %s, rank 0 step %s", r, b, step)
		}
		if want := fmt.Sprintf("rank %d preempted after step %s", r, b); !strings.Contains(j.stdout.String(), want) {
			t.Errorf("no %q in the output:\n%s", want, j.stdout)
		}
	}
	if left := waitJobGone(killDeadline); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}

// TestE2EPreempt: SIGTERM (SIGINT) to gohorovodrun, or SIGUSR1 to one
// worker (as SLURM's --signal sends it), on the embedded transport and
// under mpirun: every rank stops after the same step, checkpoints, and
// gohorovodrun exits with launch.ExitPreempted.
func TestE2EPreempt(t *testing.T) {
	_, worker := binaries(t)
	mpi := filepath.Join(binDir, "worker-mpi")
	cases := []struct {
		name     string
		np       int
		mpi      bool
		flags    []string
		toWorker bool // signal rank 1, else the launcher
		sig      syscall.Signal
	}{
		{"gloo/launcher SIGTERM", 2, false, []string{"--gloo"}, false, syscall.SIGTERM},
		{"gloo/launcher SIGINT", 3, false, []string{"--gloo"}, false, syscall.SIGINT},
		{"gloo/worker SIGUSR1", 2, false, []string{"--gloo"}, true, syscall.SIGUSR1},
		{"mpirun/launcher SIGTERM", 2, true, nil, false, syscall.SIGTERM},
		{"mpirun/worker SIGUSR1", 3, true, []string{"--mpi-args=--oversubscribe"}, true, syscall.SIGUSR1},
		{"elastic/launcher SIGTERM", 2, false, []string{"--min-np", "1", "--max-np", "2", "-H", "localhost:2"}, false, syscall.SIGTERM},
		{"elastic/worker SIGUSR1", 2, false, []string{"--min-np", "1", "--max-np", "2", "-H", "localhost:2"}, true, syscall.SIGUSR1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := worker
			if c.mpi {
				if _, err := os.Stat(mpi); err != nil {
					t.Skip("no MPI-built worker (no mpicc or cgo here)")
				}
				w = mpi
			}
			j := startPreempt(t, c.np, w, c.flags...)
			pid := j.cmd.Process.Pid
			if c.toWorker {
				pid = j.rankPID(t, 1)
			}
			if err := syscall.Kill(pid, c.sig); err != nil {
				t.Fatal(err)
			}
			if code := j.wait(t, 60*time.Second); code != launch.ExitPreempted {
				t.Errorf("gohorovodrun exited with %d, want %d (preempted)\nstdout %s\nstderr %s", code, launch.ExitPreempted, j.stdout, j.stderr)
			}
			j.checkStoppedTogether(t)
		})
	}
}

// TestE2EPreemptSecondSignal: a second SIGTERM to gohorovodrun stops the
// job at once, as an interrupt (130), and leaves nothing running.
func TestE2EPreemptSecondSignal(t *testing.T) {
	_, worker := binaries(t)
	j := startPreempt(t, 2, worker, "--gloo")
	// The workers sleep in their steps: hold them in a step by stopping
	// rank 1, so that the first signal cannot be acted on.
	r1 := j.rankPID(t, 1)
	syscall.Kill(r1, syscall.SIGSTOP)
	syscall.Kill(j.cmd.Process.Pid, syscall.SIGTERM)
	time.Sleep(preempt.Echo + 100*time.Millisecond) // sooner, it is the same one
	syscall.Kill(j.cmd.Process.Pid, syscall.SIGTERM)
	if code := j.wait(t, 60*time.Second); code != 130 {
		t.Errorf("gohorovodrun exited with %d after a second SIGTERM, want 130\nstderr %s", code, j.stderr)
	}
	if left := waitJobGone(killDeadline); len(left) > 0 {
		t.Errorf("left running: %v", left)
	}
}

// TestE2ENodesPreempt: a job of two node launchers (--nnodes 2, on this
// machine); SIGTERM to node 1's launcher alone: its workers are told, all
// four ranks agree to stop after the same step, and both launchers exit
// with ExitPreempted.
func TestE2ENodesPreempt(t *testing.T) {
	launcher, worker := build(t)
	secret := "GOHOROVOD_SECRET=" + newHexSecret(t)
	port := freePort(t)
	dir := t.TempDir()
	pod := func(rank int) []string {
		return []string{secret, "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "WORLD_SIZE=2", "RANK=" + strconv.Itoa(rank)}
	}
	var nodes []*nodeRun
	for r := 1; r >= 0; r-- {
		nodes = append(nodes, startNode(t, "", pod(r), launcher, "--nnodes", "2", "--node-rank", strconv.Itoa(r),
			"--nproc-per-node", "2", worker, "preempt", dir))
	}
	n1, n0 := nodes[0], nodes[1]
	for deadline := time.Now().Add(90 * time.Second); strings.Count(n0.stdout.String()+n1.stdout.String(), "training ") < 4; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the four ranks were not training after 90 s\nnode 0:\n%s\n%s\nnode 1:\n%s\n%s", n0.stdout.String(), n0.stderr.String(), n1.stdout.String(), n1.stderr.String())
		}
	}
	if err := n1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	n1.wait(t, "node 1", 60*time.Second)
	n0.wait(t, "node 0", 60*time.Second)
	for i, r := range []*nodeRun{n0, n1} {
		var ee *exec.ExitError
		if !errors.As(r.err, &ee) || ee.ExitCode() != launch.ExitPreempted {
			t.Errorf("node %d's launcher: %v, want exit status %d\nstdout:\n%s\nstderr:\n%s", i, r.err, launch.ExitPreempted, r.stdout.String(), r.stderr.String())
		}
	}
	j := &preemptJob{trainingJob: trainingJob{dir: dir}, np: 4, stdout: &syncBuffer{}}
	fmt.Fprint(j.stdout, n0.stdout.String()+n1.stdout.String())
	j.checkStoppedTogether(t)
}

// TestE2ESlurmRequeuePreempted: `sbatch --requeue` of a preemptible job on the
// one-node SLURM cluster, `scontrol requeue` mid-run: SLURM's SIGTERM
// reaches gohorovodrun and the workers, every rank checkpoints the same
// step and the job ends with 99; the requeued run (released at once
// instead of after SLURM's requeue delay) resumes after that step and
// finishes, running fewer steps than the whole.
func TestE2ESlurmRequeuePreempted(t *testing.T) {
	launcher, worker := build(t)
	slurm(t)
	const steps = 2000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	job := fmt.Sprintf("%s --gloo -np 2 %s preempt %s %d", launcher, worker, dir, steps)
	cmd := exec.Command("sbatch", "--parsable", "--requeue", "--open-mode=append", "-n", "2", "-o", out, "--wrap", job)
	cmd.Env = slurmEnv(t)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, b)
	}
	id := strings.TrimSpace(string(b))
	t.Cleanup(func() { exec.Command("scancel", id).Run() })
	output := func() string { b, _ := os.ReadFile(out); return string(b) }
	await := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); !ok(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("job %s: %s did not happen within 3 min\njob output:\n%s", id, what, output())
			}
		}
	}
	await("training", func() bool { return strings.Count(output(), "training ") >= 2 })
	if b, err := exec.Command("scontrol", "requeue", id).CombinedOutput(); err != nil {
		t.Fatalf("scontrol requeue: %v\n%s", err, b)
	}
	await("the preemption", func() bool { return strings.Count(output(), "preempted after step") >= 2 })
	releaseRequeued(t, id, out, filepath.Dir(launcher))
	await("the end", func() bool { s := jobState(id); return s == "" || s == "COMPLETED" })
	o := output()
	if !strings.Contains(o, "gohorovodrun: "+launch.ErrPreempted.Error()) {
		t.Errorf("the first run did not end as preempted:\n%s", o)
	}
	stopped := -1
	for r := 0; r < 2; r++ {
		var s int
		if i := strings.Index(o, fmt.Sprintf("rank %d preempted after step ", r)); i < 0 {
			t.Fatalf("rank %d was not preempted:\n%s", r, o)
		} else {
			fmt.Sscanf(o[i:], fmt.Sprintf("rank %d preempted after step %%d", r), &s)
		}
		if stopped >= 0 && s != stopped {
			t.Errorf("rank %d stopped after step %d, rank 0 after %d", r, s, stopped)
		}
		stopped = s
		for _, want := range []string{fmt.Sprintf("rank %d resumed from step %d", r, s), fmt.Sprintf("rank %d finished at step %d", r, steps-1)} {
			if !strings.Contains(o, want) {
				t.Errorf("no %q in the job's output:\n%s", want, o)
			}
		}
	}
	if stopped <= 0 || stopped >= steps-1 {
		t.Errorf("the first run stopped after step %d of %d: the second run did not run fewer steps", stopped, steps)
	}
	if info, _ := exec.Command("scontrol", "show", "job", id).CombinedOutput(); !strings.Contains(string(info), "Restarts=1") {
		t.Errorf("SLURM does not count one restart:\n%s", info)
	}
	t.Logf("job %s: first run stopped after step %d, the requeued run did steps %d to %d", id, stopped, stopped+1, steps-1)
}

// jobState is a SLURM job's state in squeue ("" once it has left).
func jobState(id string) string {
	b, _ := exec.Command("squeue", "-h", "-j", id, "-o", "%T").Output()
	return strings.TrimSpace(string(b))
}

// preemptAfter70 starts the mnist job and, once rank 0 has written the
// checkpoint of step 70, tells it to stop: SIGTERM to gohorovodrun, or
// SIGUSR1 to one worker (toWorker). The job must end with ExitPreempted
// after a checkpoint of the step it stopped at, which preemptAfter70
// returns.
func (j resumeJob) preemptAfter70(t *testing.T, ckpt string, toWorker bool) int {
	t.Helper()
	cmd := j.command(ckpt)
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	done := startIn(t, cmd, j.dir)
	wrote := regexp.MustCompile(`wrote \S*ckpt-0*([0-9]+)\.ghv`)
	for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(stdout.String(), "ckpt-000000000070.ghv"); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the job ended (%v) before the checkpoint of step 70\nstderr:\n%s", err, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of step 70 after 3 minutes\nstderr:\n%s", stderr)
		}
	}
	pid := cmd.Process.Pid
	sig := syscall.SIGTERM
	if toWorker {
		sig = syscall.SIGUSR1
		for p, line := range processesMentioning(j.dir) {
			if strings.HasPrefix(line, filepath.Join(j.dir, "mnist")+" ") {
				pid = p
				break
			}
		}
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != launch.ExitPreempted {
			t.Fatalf("the job told to stop ended with %v, want exit status %d\nstdout:\n%s\nstderr:\n%s", err, launch.ExitPreempted, stdout, stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the job still runs 2 minutes after %v\nstderr:\n%s", sig, stderr)
	}
	all := wrote.FindAllStringSubmatch(stdout.String(), -1)
	step, _ := strconv.Atoi(all[len(all)-1][1])
	if step < 70 || finalHash.MatchString(stdout.String()) {
		t.Fatalf("the last checkpoint is of step %d (want the step it stopped at, 70 or later), or it ran to its end:\n%s", step, stdout)
	}
	return step
}

// checkPreemptResume tells the job to stop in epoch 2, starts it again
// and compares its end with whole, the uninterrupted run's output.
func (j resumeJob) checkPreemptResume(t *testing.T, whole string, toWorker bool) {
	t.Helper()
	ckpt := t.TempDir()
	step := j.preemptAfter70(t, ckpt, toWorker)
	again := j.run(t, ckpt)
	if want := fmt.Sprintf("resumed from step %d ", step); !strings.Contains(again, want) {
		t.Fatalf("the rerun did not resume from the preemption's checkpoint (%q):\n%s", want, again)
	}
	if got, want := finalHash.FindString(again), finalHash.FindString(whole); got != want {
		t.Fatalf("the resumed run ended with %q, the uninterrupted one with %q", got, want)
	}
	t.Logf("stopped with a checkpoint of step %d; the rerun resumed there and ended as the uninterrupted run", step)
}

// TestE2EMNISTPreempt: examples/mnist with --checkpoint-dir told to stop
// in epoch 2 (SIGTERM to gohorovodrun; SIGUSR1 to one worker, as SLURM's
// --signal sends it), on the embedded transport and under mpirun: the job
// checkpoints the step it stopped at on every rank and exits with
// ExitPreempted; the same command resumes from that step and ends with
// the uninterrupted run's parameters, bit for bit.
func TestE2EMNISTPreempt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		mpi      bool
		toWorker bool
	}{
		{"embedded/launcher SIGTERM", false, false},
		{"embedded/worker SIGUSR1", false, true},
		{"mpirun/launcher SIGTERM", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			resume := embeddedResume
			if c.mpi {
				resume = mpiResume
			}
			j, whole := resume(t)
			j.checkPreemptResume(t, whole, c.toWorker)
		})
	}
}
