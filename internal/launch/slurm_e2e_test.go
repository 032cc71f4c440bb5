package launch_test

import (
	"fmt"
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

// The tests in this file run jobs on a real one-node SLURM cluster, which
// scripts/slurm.sh installs (Debian's packages) and starts when it is not
// up: sbatch and salloc around gohorovodrun, and srun starting the
// workers itself, on both transports.

var (
	slurmOnce sync.Once
	slurmErr  error
	slurmOut  []byte
)

// slurm brings the test cluster up once, or skips where it cannot be.
func slurm(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("SLURM end-to-end tests skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("the SLURM tests start a one-node cluster (scripts/slurm.sh), which needs root")
	}
	slurmOnce.Do(func() {
		slurmOut, slurmErr = exec.Command("bash", "../../scripts/slurm.sh", "up").CombinedOutput()
	})
	if slurmErr != nil {
		if strings.Contains(string(slurmOut), "Unable to locate package") || strings.Contains(string(slurmOut), "Could not resolve") {
			t.Skipf("Debian's slurm packages cannot be installed here:\n%s", slurmOut)
		}
		t.Fatalf("scripts/slurm.sh up: %v\n%s", slurmErr, slurmOut)
	}
}

// slurmEnv is the test's environment for a SLURM command: without the
// variables of an allocation that the test itself may run in, and without
// any launcher's, plus kv.
func slurmEnv(t *testing.T, kv ...string) []string {
	return foreignEnv(t, append([]string{"GOHOROVOD_KEY_FILE=" + filepath.Join(t.TempDir(), "key")}, kv...)...)
}

// wantRanks checks that out has the hvd-allreduce line of every rank of
// a job of size ranks on one node.
func wantRanks(t *testing.T, out string, size int) {
	t.Helper()
	sum := size * (size + 1) / 2
	for r := 0; r < size; r++ {
		want := fmt.Sprintf("rank %d size %d local %d/%d cross 0/1 sum %d %d", r, size, r, size, sum, sum)
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the job's output:\n%s", want, out)
		}
	}
}

func TestE2ESlurmBatchAndAlloc(t *testing.T) {
	launcher, worker := build(t)
	slurm(t)
	for _, tr := range transports(worker) {
		job := fmt.Sprintf("%s %s -np 3 %s hvd-allreduce", launcher, strings.Join(tr.args, " "), tr.worker)
		t.Run("sbatch "+tr.name, func(t *testing.T) {
			tr.skipIfMissing(t)
			out := filepath.Join(t.TempDir(), "out")
			cmd := exec.Command("sbatch", "--wait", "-n", "3", "-o", out, "--wrap", job)
			cmd.Env = slurmEnv(t)
			msg, err := runFor(t, cmd, 3*time.Minute)
			b, _ := os.ReadFile(out)
			if err != nil {
				t.Fatalf("sbatch: %v\n%s\njob output:\n%s", err, msg, b)
			}
			wantRanks(t, string(b), 3)
		})
		t.Run("salloc "+tr.name, func(t *testing.T) {
			tr.skipIfMissing(t)
			cmd := exec.Command("salloc", append([]string{"-n", "2"}, strings.Fields(strings.Replace(job, "-np 3", "-np 2", 1))...)...)
			cmd.Env = slurmEnv(t)
			out, err := runFor(t, cmd, 3*time.Minute)
			if err != nil {
				t.Fatalf("salloc: %v\n%s", err, out)
			}
			wantRanks(t, out, 2)
		})
	}
}

func TestE2ESrun(t *testing.T) {
	_, worker := build(t)
	slurm(t)
	t.Run("embedded np3", func(t *testing.T) {
		cmd := exec.Command("srun", "-n", "3", worker, "hvd-allreduce")
		cmd.Env = slurmEnv(t)
		out, err := runFor(t, cmd, 2*time.Minute)
		if err != nil {
			t.Fatalf("srun: %v\n%s", err, out)
		}
		wantRanks(t, out, 3)
	})
	t.Run("MPI build, embedded by choice", func(t *testing.T) {
		cmd := exec.Command("srun", "-n", "2", mpiWorker(t), "hvd-allreduce")
		cmd.Env = slurmEnv(t, "HOROVOD_CONTROLLER=gloo")
		out, err := runFor(t, cmd, 2*time.Minute)
		if err != nil {
			t.Fatalf("srun: %v\n%s", err, out)
		}
		wantRanks(t, out, 2)
	})
	t.Run("MPI through pmix", func(t *testing.T) {
		cmd := exec.Command("srun", "--mpi=pmix", "-n", "2", mpiWorker(t), "hvd-allreduce")
		cmd.Env = slurmEnv(t)
		out, err := runFor(t, cmd, 2*time.Minute)
		if err != nil {
			t.Fatalf("srun --mpi=pmix: %v\n%s", err, out)
		}
		wantRanks(t, out, 2)
	})
	t.Run("MPI without a PMI is refused at once", func(t *testing.T) {
		cmd := exec.Command("srun", "-n", "2", mpiWorker(t), "hvd-allreduce")
		cmd.Env = slurmEnv(t)
		start := time.Now()
		out, err := runFor(t, cmd, 30*time.Second)
		took := time.Since(start)
		if err == nil {
			t.Fatalf("a bare srun of an MPI build succeeded:\n%s", out)
		}
		if !strings.Contains(out, "srun --mpi=pmix") || !strings.Contains(out, "HOROVOD_CONTROLLER=gloo") {
			t.Errorf("the error does not say to add --mpi=pmix or to use the embedded transport:\n%s", out)
		}
		if strings.Contains(out, "OMPI was not built with SLURM's PMI support") {
			t.Errorf("Open MPI's own abort ran before our check:\n%s", out)
		}
		if took > 10*time.Second {
			t.Errorf("the refusal took %v (want under 10 s)", took)
		}
	})
	t.Run("a key file others may read is refused", func(t *testing.T) {
		key := filepath.Join(t.TempDir(), "key")
		if err := os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(key, 0o644)
		cmd := exec.Command("srun", "-n", "2", worker, "hvd-allreduce")
		cmd.Env = append(slurmEnv(t), "GOHOROVOD_KEY_FILE="+key)
		out, err := runFor(t, cmd, time.Minute)
		if err == nil || !strings.Contains(out, "chmod 600") {
			t.Errorf("srun with a readable key file: %v\n%s", err, out)
		}
	})
}

func TestE2ESrunRankKilled(t *testing.T) {
	_, worker := build(t)
	slurm(t)
	cases := []struct {
		name string
		args []string
		env  []string
	}{
		{"embedded", []string{"-n", "3", worker}, nil},
		{"MPI through pmix", []string{"--mpi=pmix", "-n", "3", mpiWorker(t)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command("srun", append(c.args, "train", dir)...)
			cmd.Env = slurmEnv(t, append(c.env, "HOROVOD_HEARTBEAT_TIMEOUT_SECONDS=5")...)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			done := startGroup(t, cmd)
			var pid int
			for deadline := time.Now().Add(time.Minute); ; {
				m, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
				if len(m) == 3 {
					b, _ := os.ReadFile(filepath.Join(dir, "1.pid"))
					pid, _ = strconv.Atoi(string(b))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the job did not start training:\n%s", out.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(500 * time.Millisecond)
			syscall.Kill(pid, syscall.SIGKILL)
			start := time.Now()
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("srun succeeded after a rank was killed:\n%s", out.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("srun still running 60 s after rank 1 was killed:\n%s", out.String())
			}
			// Our runtime names rank 1; with pmix, SLURM cancels the step
			// first and names its task 1.
			if !strings.Contains(out.String(), "rank 1") && !strings.Contains(out.String(), "task 1") {
				t.Errorf("nothing names rank 1:\n%s", out.String())
			}
			t.Logf("srun ended %v after rank 1 was killed", time.Since(start).Round(time.Millisecond))
		})
	}
}
