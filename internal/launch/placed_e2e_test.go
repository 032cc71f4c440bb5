package launch_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests in this file start workers as torchrun, Kubeflow's PyTorchJob,
// Volcano and SLURM's srun do, without gohorovodrun: the worker finds its
// place from those engines' variables (internal/job/origin).

// foreignEnv is the test's environment without the variables of any
// launcher (so that a test run inside an allocation or a job does not
// hand them to the workers), plus kv.
func foreignEnv(t *testing.T, kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		name, _, _ := strings.Cut(e, "=")
		switch {
		case strings.HasPrefix(name, "SLURM_"), strings.HasPrefix(name, "OMPI_"), strings.HasPrefix(name, "PMI"),
			strings.HasPrefix(name, "HOROVOD_"), strings.HasPrefix(name, "GOHOROVOD_"), strings.HasPrefix(name, "TORCHELASTIC_"),
			name == "RANK", name == "WORLD_SIZE", name == "LOCAL_RANK", name == "LOCAL_WORLD_SIZE", name == "GROUP_RANK",
			name == "MASTER_ADDR", name == "MASTER_PORT":
			continue
		}
		env = append(env, e)
	}
	return append(env, kv...)
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// startProcs starts worker once per environment.
func startProcs(t *testing.T, worker string, args []string, envs [][]string) []*nodeRun {
	var ps []*nodeRun
	for _, env := range envs {
		cmd := exec.Command(worker, args...)
		cmd.Env = env
		ps = append(ps, startRun(t, cmd))
	}
	return ps
}

// result waits for r at most d, failing the test if it still runs, and
// returns how it ended.
func (r *nodeRun) result(t *testing.T, d time.Duration) error {
	t.Helper()
	r.wait(t, strings.Join(r.cmd.Args, " "), d)
	return r.err
}

func TestE2EPlacedByTorchVariables(t *testing.T) {
	_, worker := build(t)
	key := filepath.Join(t.TempDir(), "key")
	cases := []struct {
		name        string
		size, local int // local: LOCAL_WORLD_SIZE, 0 for one process per pod
	}{
		{"PyTorchJob one per pod np3", 3, 0},
		{"torchrun two nodes of two", 4, 2},
		{"torchrun one node of three", 3, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			port := freePort(t)
			var envs [][]string
			for r := 0; r < c.size; r++ {
				kv := []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(c.size),
					"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "GOHOROVOD_KEY_FILE=" + key}
				if c.local > 0 {
					kv = append(kv, "LOCAL_RANK="+strconv.Itoa(r%c.local), "LOCAL_WORLD_SIZE="+strconv.Itoa(c.local),
						"GROUP_RANK="+strconv.Itoa(r/c.local), "TORCHELASTIC_RUN_ID=test", "TORCHELASTIC_RESTART_COUNT=0",
						"TORCHELASTIC_USE_AGENT_STORE=False")
				}
				envs = append(envs, foreignEnv(t, kv...))
			}
			ps := startProcs(t, worker, []string{"hvd-allreduce"}, envs)
			sum := c.size * (c.size + 1) / 2
			local, cross := 1, c.size
			if c.local > 0 {
				local, cross = c.local, c.size/c.local
			}
			for r, p := range ps {
				if err := p.result(t, time.Minute); err != nil {
					t.Fatalf("rank %d: %v\n%s", r, err, p.stderr.String())
				}
				want := fmt.Sprintf("rank %d size %d local %d/%d cross %d/%d sum %d %d", r, c.size, r%local, local, r/local, cross, sum, sum)
				if got := strings.TrimSpace(p.stdout.String()); got != want {
					t.Errorf("rank %d printed %q, want %q", r, got, want)
				}
			}
		})
	}
}

func TestE2EPlacedFaults(t *testing.T) {
	_, worker := build(t)
	t.Parallel()
	key := filepath.Join(t.TempDir(), "key")
	torchEnv := func(port string, r, size int, kv ...string) []string {
		return foreignEnv(t, append([]string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(size),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "GOHOROVOD_KEY_FILE=" + key}, kv...)...)
	}

	t.Run("a rank never arrives", func(t *testing.T) {
		port := freePort(t)
		ps := startProcs(t, worker, []string{"hvd-allreduce"}, [][]string{
			torchEnv(port, 0, 3, "HOROVOD_GLOO_TIMEOUT_SECONDS=3"), torchEnv(port, 1, 3, "HOROVOD_GLOO_TIMEOUT_SECONDS=3")})
		for r, p := range ps {
			if err := p.result(t, 30*time.Second); err == nil {
				t.Fatalf("rank %d succeeded without rank 2", r)
			}
		}
		// The missing worker is node2's (one process per pod), and the
		// error says where the job meets.
		if e := ps[1].stderr.String(); !strings.Contains(e, "node2") || !strings.Contains(e, "127.0.0.1:"+port) {
			t.Errorf("rank 1's error does not name the missing node2 and the meeting address:\n%s", e)
		}
	})

	t.Run("a wrong secret", func(t *testing.T) {
		port := freePort(t)
		good := strings.Repeat("ab", 32)
		ps := startProcs(t, worker, []string{"hvd-allreduce"}, [][]string{
			torchEnv(port, 0, 2, "GOHOROVOD_SECRET="+good, "HOROVOD_GLOO_TIMEOUT_SECONDS=5"),
			torchEnv(port, 1, 2, "GOHOROVOD_SECRET="+strings.Repeat("cd", 32), "HOROVOD_GLOO_TIMEOUT_SECONDS=5")})
		if err := ps[1].result(t, 30*time.Second); err == nil {
			t.Fatal("a worker with another secret joined")
		}
		if e := ps[1].stderr.String(); !strings.Contains(e, "secret") {
			t.Errorf("the refused worker's error does not mention the secret:\n%s", e)
		}
		if err := ps[0].result(t, 30*time.Second); err == nil {
			t.Fatal("rank 0 succeeded alone")
		}
	})

	t.Run("a rank dies while training", func(t *testing.T) {
		port := freePort(t)
		dir := t.TempDir()
		ps := startProcs(t, worker, []string{"train", dir}, [][]string{
			torchEnv(port, 0, 3), torchEnv(port, 1, 3), torchEnv(port, 2, 3)})
		deadline := time.Now().Add(time.Minute)
		for {
			m, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
			if len(m) == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the workers did not start training:\n%s\n%s", ps[0].stderr.String(), ps[2].stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		ps[1].cmd.Process.Signal(syscall.SIGKILL)
		start := time.Now()
		// Without a launcher, the first survivor to notice names rank 1;
		// the other may instead name that survivor, which went down
		// after it: both errors name a lost rank, and one names rank 1.
		named := 0
		for _, r := range []int{0, 2} {
			if err := ps[r].result(t, 45*time.Second); err == nil {
				t.Fatalf("rank %d went on after rank 1 died", r)
			}
			e := ps[r].stderr.String()
			switch {
			case strings.Contains(e, "rank 1"):
				named++
			case !strings.Contains(e, "rank "+strconv.Itoa(2-r)):
				t.Errorf("rank %d's error names no lost rank:\n%s", r, e)
			}
		}
		if named == 0 {
			t.Errorf("no survivor names rank 1:\n%s\n%s", ps[0].stderr.String(), ps[2].stderr.String())
		}
		t.Logf("the survivors ended %v after rank 1 was killed", time.Since(start).Round(time.Millisecond))
	})
}

// torchrun returns the command that starts torch's torchrun: its own
// launcher (torch.distributed.run) through testdata/torchrun/torchrun.py,
// which works around Debian 12's torch 1.13 failing under Python 3.11
// before it starts any worker. Its agent keeps its logs in the test's
// temporary directory (--log_dir), which the test removes, instead of
// leaving a torchelastic_* directory in /tmp. It skips the test where no
// Python here has torch.
func torchrun(t *testing.T) []string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import torch.distributed.run").Run() == nil {
			// The agent looks at its workers every --monitor_interval
			// (5 s by default in torch 1.13): a job's end and a failure
			// are noticed sooner.
			return []string{py, "testdata/torchrun/torchrun.py", "--log_dir", t.TempDir(), "--monitor_interval", "0.5"}
		}
	}
	t.Skip("torch is not installed (apt-get install python3-torch; scripts/deps.sh does): torchrun tests skipped")
	return nil
}

func TestE2ETorchrun(t *testing.T) {
	_, worker := build(t)
	run := torchrun(t)
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want int // lines of "rank R size 2"
	}{
		// c10d rendezvous: MASTER_PORT is free, rank 0 hosts gohorovod's rendezvous.
		{"standalone", []string{"--standalone", "--nproc_per_node", "2"}, 2},
		// static rendezvous: the agent serves its TCPStore at the master port.
		{"static", []string{"--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", freePort(t)}, 2},
		// The same c10d rendezvous on a port of the test's: --standalone
		// always takes port 29400, so the two cannot run at once.
		{"three workers", []string{"--nnodes", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:" + freePort(t), "--nproc_per_node", "3"}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append(append([]string{}, c.args...), "--no_python", worker, "hvd-allreduce")
			cmd := exec.Command(run[0], append(run[1:], args...)...)
			cmd.Env = foreignEnv(t, "GOHOROVOD_KEY_FILE="+filepath.Join(t.TempDir(), "key"))
			out, err := runFor(t, cmd, 2*time.Minute)
			if err != nil {
				t.Fatalf("torchrun: %v\n%s", err, out)
			}
			sum := c.want * (c.want + 1) / 2
			for r := 0; r < c.want; r++ {
				want := fmt.Sprintf("rank %d size %d local %d/%d cross 0/1 sum %d %d", r, c.want, r, c.want, sum, sum)
				if !strings.Contains(out, want) {
					t.Errorf("no %q in torchrun's output:\n%s", want, out)
				}
			}
		})
	}
	t.Run("restart after a failure", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(run[0], append(run[1:], "--nnodes", "1", "--nproc_per_node", "2", "--max_restarts", "1",
			"--master_addr", "127.0.0.1", "--master_port", freePort(t), "--no_python", worker, "fail-first")...)
		cmd.Env = foreignEnv(t, "GOHOROVOD_KEY_FILE="+filepath.Join(t.TempDir(), "key"))
		out, err := runFor(t, cmd, 2*time.Minute)
		if err != nil {
			t.Fatalf("torchrun with a restart: %v\n%s", err, out)
		}
		if !strings.Contains(out, "failing on the first attempt") {
			t.Errorf("the first attempt did not fail:\n%s", out)
		}
		for r := 0; r < 2; r++ {
			if want := fmt.Sprintf("rank %d size 2 local %d/2 cross 0/1 sum 3 3", r, r); !strings.Contains(out, want) {
				t.Errorf("no %q after the restart:\n%s", want, out)
			}
		}
	})
}

// runFor runs cmd with its output combined, killing it after d.
func runFor(t *testing.T, cmd *exec.Cmd, d time.Duration) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(d):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return out.String(), fmt.Errorf("still running after %v", d)
	}
}
