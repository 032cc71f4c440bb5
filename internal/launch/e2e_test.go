package launch_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/launch"
	"github.com/gohorovod/gohorovod/internal/procid"
	"github.com/gohorovod/gohorovod/internal/sockdir"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// The end-to-end tests build gohorovodrun and the test worker
// (testdata/worker) and run them under the real mpirun at np 2 and 4.

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) (launcher, worker string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not on PATH (make deps installs Open MPI): end-to-end launch tests skipped")
	}
	return build(t)
}

// build builds gohorovodrun and the test worker (and, where MPI can be
// built, the MPI worker) once; the embedded transport's tests need no
// mpirun.
func build(t *testing.T) (launcher, worker string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "gohorovodrun-e2e")
		if buildErr != nil {
			return
		}
		builds := [][]string{{"gohorovodrun", "../../cmd/gohorovodrun"}, {"worker", "./testdata/worker"}}
		if _, err := exec.LookPath("mpicc"); err == nil && cgoEnabled() {
			builds = append(builds, []string{"worker-mpi", "./testdata/worker", "-tags", "mpi"})
		}
		for _, b := range builds {
			args := append([]string{"build", "-o", filepath.Join(binDir, b[0])}, b[2:]...)
			out, err := exec.Command("go", append(args, b[1])...).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "gohorovodrun"), filepath.Join(binDir, "worker")
}

// cgoEnabled reports whether the go command builds cgo code here (the MPI
// worker needs it; CGO_ENABLED=0 builds report MPI as not built in).
func cgoEnabled() bool {
	out, err := exec.Command("go", "env", "CGO_ENABLED").Output()
	return err == nil && strings.TrimSpace(string(out)) == "1"
}

func TestMain(m *testing.M) {
	// TestRunWithGuard starts this test binary as the guard of its job.
	if status, ok := launch.GuardMain(); ok {
		os.Exit(status)
	}
	flag.Parse()
	// The tests that run in parallel (t.Parallel) mostly wait: for
	// grace periods, heartbeat timeouts, torchrun's agent, jobs of two
	// ranks. Unless -parallel says otherwise, more of them run at once
	// than the machine has cores (-parallel's default).
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", strconv.Itoa(max(4, runtime.GOMAXPROCS(0))))
	}
	// Open MPI keeps a session directory per node (its PMIx store, the
	// topology) under /tmp, which a job whose node the test kills or
	// silences never removes: the jobs' mpirun keep theirs in a directory
	// of the package's, removed at the end.
	ompiTmp := ""
	if _, set := os.LookupEnv("OMPI_MCA_orte_tmpdir_base"); !set {
		if d, err := os.MkdirTemp("", "gohorovod-launch-ompi-"); err == nil {
			ompiTmp = d
			os.Setenv("OMPI_MCA_orte_tmpdir_base", d)
		}
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if ompiTmp != "" {
		os.RemoveAll(ompiTmp)
	}
	// The private socket directories of workers the tests killed: a
	// later gohorovod process would remove them, but none may come.
	sockdir.Clean(os.TempDir())
	os.Exit(code)
}

var nps = []int{2, 4}

// EnvMPIRunForTest is launch.EnvMPIRun (this file is an external test).
const EnvMPIRunForTest = "GOHOROVOD_MPIRUN"

func TestE2EKnobsReachWorkers(t *testing.T) {
	launcher, worker := binaries(t)
	t.Parallel()
	for _, np := range nps {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			cmd := exec.Command(launcher, "-np", strconv.Itoa(np), "--cycle-time-ms", "2.5",
				"--stall-check-shutdown-time-seconds", "5", "--log-level", "debug", "--timeline-filename", "tl.json", worker, "env")
			cmd.Env = append(os.Environ(), "HOROVOD_CACHE_CAPACITY=9", "HOROVOD_FUSION_THRESHOLD=123")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("gohorovodrun: %v\nstdout %s\nstderr %s", err, out, stderr.String())
			}
			want := config.Default()
			want.CycleTime, want.StallShutdownTime, want.LogLevel = 2500*time.Microsecond, 5*time.Second, config.LevelDebug
			want.Timeline, want.CacheCapacity, want.FusionThreshold = "tl.json", 9, 123
			ranks := map[int]bool{}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				// "[1,R]<stdout>:rank R size N KEY=value ..."
				_, body, ok := strings.Cut(line, "<stdout>:")
				f := strings.Fields(body)
				if !ok || len(f) < 4 || f[0] != "rank" || f[3] != strconv.Itoa(np) {
					t.Fatalf("unexpected output line %q", line)
				}
				r, _ := strconv.Atoi(f[1])
				ranks[r] = true
				got, err := config.FromEnv(config.Lookup(f[4:]))
				// GOHOROVOD_LAUNCHER names the launcher process.
				if id, perr := procid.Parse(got.Launcher); perr != nil || id.PID != cmd.Process.Pid {
					t.Errorf("rank %d read GOHOROVOD_LAUNCHER=%q (%v), want launcher pid %d", r, got.Launcher, perr, cmd.Process.Pid)
				}
				got.Launcher = ""
				if err != nil || got != want {
					t.Errorf("rank %d read %+v, %v\nwant %+v", r, got, err, want)
				}
			}
			if len(ranks) != np {
				t.Errorf("heard from ranks %v, want %d ranks", ranks, np)
			}
		})
	}
}

// TestE2EMPIWorkers runs real MPI programs (the worker built with -tags
// mpi) through gohorovodrun: the mpirun options it chooses must give
// working communication among all ranks.
func TestE2EMPIWorkers(t *testing.T) {
	launcher, _ := binaries(t)
	worker := mpiWorker(t)
	for _, np := range nps {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			cmd := exec.Command(launcher, "-np", strconv.Itoa(np), worker, "allreduce")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("gohorovodrun: %v\nstdout %s\nstderr %s", err, out, stderr.String())
			}
			want := fmt.Sprintf("size %d sum %d", np, np*(np+1)/2)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			for _, l := range lines {
				if !strings.Contains(l, want) {
					t.Errorf("line %q lacks %q", l, want)
				}
			}
			if len(lines) != np {
				t.Errorf("%d output lines, want %d", len(lines), np)
			}
		})
	}
	// A rank that fails after MPI_Init, while the others wait in a
	// barrier: mpirun stops them, the launcher names the rank.
	t.Run("mpifail_np4", func(t *testing.T) {
		cmd := exec.Command(launcher, "-np", "4", worker, "mpifail", "2", "5")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		want := "gohorovodrun: rank 2 exited with status 5; the other workers were stopped"
		if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(stderr.String(), want) {
			t.Errorf("gohorovodrun = %v, want exit 5 and %q\nstderr %s", err, want, stderr.String())
		}
	})
}

// TestE2EMPICH launches through MPICH's Hydra mpirun, where it is
// installed beside Open MPI, at np 2 (MPICH oversubscribed is slow): knobs
// through -genv, and a failing MPI rank (a worker built against MPICH).
// Hydra does not say which rank failed, so the message names "a worker".
func TestE2EMPICH(t *testing.T) {
	launcher, worker := binaries(t)
	if _, err := exec.LookPath("mpirun.mpich"); err != nil {
		t.Skip("mpirun.mpich not on PATH: MPICH launch not tested")
	}
	env := append(os.Environ(), EnvMPIRunForTest+"=mpirun.mpich")
	cmd := exec.Command(launcher, "-np", "2", "--cycle-time-ms", "4", worker, "env")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gohorovodrun: %v\nstderr %s", err, stderr.String())
	}
	for _, r := range []string{"[0] rank 0 size 2 ", "[1] rank 1 size 2 "} {
		if !strings.Contains(string(out), r) {
			t.Errorf("output lacks %q:\n%s", r, out)
		}
	}
	if n := strings.Count(string(out), "HOROVOD_CYCLE_TIME=4 "); n != 2 {
		t.Errorf("%d ranks read HOROVOD_CYCLE_TIME=4, want 2:\n%s", n, out)
	}

	if err := exec.Command("pkg-config", "--exists", "mpich").Run(); err != nil || !cgoEnabled() {
		t.Skip("MPICH development files (pkg-config mpich) missing or cgo disabled: MPICH failure not tested")
	}
	mpichWorker := filepath.Join(binDir, "worker-mpich")
	build := exec.Command("go", "build", "-tags", "mpi,mpich", "-o", mpichWorker, "./testdata/worker")
	build.Env = append(os.Environ(), "CGO_CFLAGS=-I/usr/include/x86_64-linux-gnu/mpich", "CGO_LDFLAGS=-Wl,--as-needed -lmpich")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the MPICH worker: %v\n%s", err, b)
	}
	cmd = exec.Command(launcher, "-np", "2", mpichWorker, "mpifail", "1", "5")
	cmd.Env = env
	stderr.Reset()
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(stderr.String(), "exited with status 5; the other workers were stopped") {
		t.Errorf("failing rank under MPICH: %v, stderr %s", err, stderr.String())
	}
}

// TestE2EStallShutdown is Horovod's stall test through the launcher: rank 0
// allreduces one name and the others another, so every rank stalls; with
// --stall-check-shutdown-time-seconds the runtime's stall inspector shuts
// the job down, every worker's allreduce fails with ErrShutdown (exit 3),
// and the launcher ends instead of hanging.
func TestE2EStallShutdown(t *testing.T) {
	launcher, _ := binaries(t)
	worker := mpiWorker(t)
	t.Parallel()
	for _, np := range nps {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(launcher, "-np", strconv.Itoa(np), "--stall-check-warning-time-seconds", "1",
				"--stall-check-shutdown-time-seconds", "2", worker, "stall")
			stderr := runWant(t, cmd, 3) // ErrShutdown in the worker
			for _, want := range []string{"is stalled for longer than 2 seconds. Will shutdown.", "exited with status 3; the other workers were stopped"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

func TestE2EFailingRank(t *testing.T) {
	launcher, worker := binaries(t)
	for _, np := range nps {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			dir := t.TempDir()
			bad := np - 1
			cmd := exec.Command(launcher, "-np", strconv.Itoa(np), worker, "fail", strconv.Itoa(bad), "3", dir)
			stderr := runWant(t, cmd, 3)
			want := fmt.Sprintf("gohorovodrun: rank %d exited with status 3; the other workers were stopped. "+
				"Its last error output: worker %d: failing with 3", bad, bad)
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
			pids := readPIDs(t, dir)
			if len(pids) != np-1 {
				t.Errorf("%d other ranks started, want %d", len(pids), np-1)
			}
			assertGone(t, pids)
		})
	}
}

// TestE2ESignalStopsEveryWorker: SIGINT or SIGTERM, twice, to gohorovodrun
// stops every worker under mpirun and ends with the interrupt's status.
func TestE2ESignalStopsEveryWorker(t *testing.T) {
	launcher, worker := binaries(t)
	for i, np := range nps {
		sig := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}[i%2]
		t.Run(fmt.Sprintf("np%d_%v", np, sig), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(launcher, "-np", strconv.Itoa(np), worker, "hang", dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			// Wait until every rank says it is running.
			sc := bufio.NewScanner(stdout)
			ready := 0
			for ready < np && sc.Scan() {
				if strings.Contains(sc.Text(), "ready") {
					ready++
				}
			}
			if ready != np {
				t.Fatalf("%d of %d ranks ready; stderr %s", ready, np, stderr.String())
			}
			pids := readPIDs(t, dir)
			// One signal stops them at once: "hang" does not watch
			// for it (optim/preempt), so there is no step boundary to
			// wait for.
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = bufio.NewReader(stdout).WriteTo(discard{}) }()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("gohorovodrun still running 20 s after %v (the grace period is for workers that watch)", sig)
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 130 {
				t.Errorf("gohorovodrun after %v = %v, want exit status 130\nstderr %s", sig, err, stderr.String())
			}
			if len(pids) != np {
				t.Errorf("found %d pid files, want %d", len(pids), np)
			}
			assertGone(t, pids)
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func readPIDs(t *testing.T, dir string) []int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		pids = append(pids, p)
	}
	return pids
}

// runWant runs cmd, fails the test unless it exits with status want, and
// returns its standard error.
func runWant(t *testing.T, cmd *exec.Cmd, want int) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != want {
		t.Fatalf("gohorovodrun = %v, want exit status %d\nstderr %s", err, want, stderr.String())
	}
	return stderr.String()
}

// wantTwoByTwo checks lines, the hvd-allreduce lines of a job of 4 ranks
// on 2 nodes of 2 (in any order), each after prefix(rank).
func wantTwoByTwo(t *testing.T, lines []string, prefix func(rank int) string) {
	t.Helper()
	sort.Strings(lines)
	var want []string
	for r := 0; r < 4; r++ {
		want = append(want, fmt.Sprintf("%srank %d size 4 local %d/2 cross %d/2 sum 10 10", prefix(r), r, r%2, r/2))
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("workers printed:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// assertGone checks that every worker has ended. mpirun reaps its workers
// before it exits, so they should be gone already; allow a few seconds for
// the kernel to finish tearing them down.
func assertGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range pids {
		for alive(p) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(p) {
			t.Errorf("worker pid %d is still running", p)
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}
