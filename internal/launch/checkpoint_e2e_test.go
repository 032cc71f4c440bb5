package launch_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The resume tests: examples/mnist with --checkpoint-dir, every process of
// the job killed with SIGKILL in the middle of epoch 2, the same command
// started again: it resumes from the newest checkpoint and ends with the
// parameters of a run that was never interrupted, bit for bit.

// resumeArgs are mnist's flags: 3 epochs of 47 steps at np 2 (6,000
// images, 64 per rank and step), a checkpoint every 10 steps.
var resumeArgs = []string{"--epochs", "3", "--train-limit", "6000", "--checkpoint-every", "10"}

// resumeJob is how one transport runs mnist: the directory of its
// binaries (every process of the job mentions it), and the environment.
type resumeJob struct {
	dir string
	env []string
	// elastic launches an elastic job (the launcher's elastic flags,
	// mnist's --elastic, a commit every 5 steps).
	elastic bool
}

// command returns `gohorovodrun -np 2 mnist --checkpoint-dir ckpt ...`.
func (j resumeJob) command(ckpt string) *exec.Cmd {
	args := []string{"-np", "2"}
	if j.elastic {
		args = append(args, "--min-np", "2", "-H", "localhost:2")
	}
	args = append(append(args, filepath.Join(j.dir, "mnist"), "--checkpoint-dir", ckpt), resumeArgs...)
	if j.elastic {
		args = append(args, "--elastic", "--commit-every", "5")
	}
	cmd := exec.Command(filepath.Join(j.dir, "gohorovodrun"), args...)
	cmd.Env = j.env
	return cmd
}

// finalHash is the line mnist ends with: the parameters' hash after every
// step.
var finalHash = regexp.MustCompile(`parameters: fnv-1a [0-9a-f]{16} after 141 steps`)

// run runs the job to its end and returns rank 0's output.
func (j resumeJob) run(t *testing.T, ckpt string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := j.command(ckpt)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", cmd.Args, err, stdout.String(), stderr.String())
	}
	if !finalHash.Match(stdout.Bytes()) {
		t.Fatalf("no final parameters in the output:\n%s", stdout.String())
	}
	return stdout.String()
}

// runAndKill starts the job and, once rank 0 has written the checkpoint
// of step 70 (epoch 2 is steps 48 to 94), SIGKILLs every process of it at
// once: the launcher, mpirun if any, every worker.
func (j resumeJob) runAndKill(t *testing.T, ckpt string) {
	t.Helper()
	cmd := j.command(ckpt)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	done := startIn(t, cmd, j.dir)
	seen := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var out bytes.Buffer
		for sc.Scan() {
			fmt.Fprintln(&out, sc.Text())
			if bytes.Contains(sc.Bytes(), []byte("wrote "+filepath.Join(ckpt, "ckpt-000000000070.ghv"))) {
				seen <- out.String()
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case out := <-seen:
		t.Logf("killing the job after:\n%s", out)
	case err := <-done:
		t.Fatalf("the job ended (%v) before the checkpoint of step 70\nstderr:\n%s", err, stderr.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("no checkpoint of step 70 after 3 minutes\nstderr:\n%s", stderr.String())
	}
	procs := processesMentioning(j.dir)
	for pid := range procs {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(procs) < 3 {
		t.Fatalf("the job had %d processes: %v", len(procs), procs)
	}
	<-done
	if left := waitMentioningGone(j.dir, 10*time.Second); len(left) > 0 {
		t.Fatalf("left running after SIGKILL: %v", left)
	}
}

// checkResume kills the job and starts it again, and compares the end
// with whole, the output of an uninterrupted run. With damage, the newest
// checkpoint is truncated to half after the kill: the rerun must pass
// over it, by name, and resume from the one before.
func (j resumeJob) checkResume(t *testing.T, whole string, damage bool) {
	ckpt := t.TempDir()
	j.runAndKill(t, ckpt)
	first := 70 // the first step the rerun may resume from
	if damage {
		newest := truncateNewest(t, ckpt)
		first -= 10
		defer func() {
			if _, err := os.Stat(newest + ".damaged"); err != nil {
				t.Errorf("the damaged checkpoint was not renamed aside: %v", err)
			}
		}()
	}
	again := j.run(t, ckpt)
	t.Logf("the rerun:\n%s", again)
	m := regexp.MustCompile(`resumed from step ([0-9]+) \(epoch 2\)`).FindStringSubmatch(again)
	if m == nil {
		t.Fatalf("the rerun did not resume in epoch 2:\n%s", again)
	}
	if step, _ := strconv.Atoi(m[1]); step < first || step > 94 {
		t.Fatalf("resumed from step %d, want one of epoch 2 from %d on", step, first)
	}
	if damage && !regexp.MustCompile(`passing over \S+ckpt-0+[0-9]+\.ghv is damaged: truncated`).MatchString(again) {
		t.Fatalf("the rerun did not report the damaged checkpoint:\n%s", again)
	}
	if got, want := finalHash.FindString(again), finalHash.FindString(whole); got != want {
		t.Fatalf("the resumed run ended with %q, the uninterrupted one with %q", got, want)
	}
}

// truncateNewest cuts the newest checkpoint in dir to half its length and
// returns its path.
func truncateNewest(t *testing.T, dir string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "ckpt-*.ghv"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no checkpoint in %s (%v)", dir, err)
	}
	newest := names[len(names)-1] // the names sort by step
	fi, err := os.Stat(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(newest, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	return newest
}

// buildResume builds gohorovodrun and mnist into dir, with the
// environment variables and tags given.
func buildResume(dir string, env []string, tags ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, b := range [][2]string{{"gohorovodrun", "../../cmd/gohorovodrun"}, {"mnist", "../../examples/mnist"}} {
		cmd := exec.Command("go", append(append([]string{"build", "-o", filepath.Join(dir, b[0])}, tags...), b[1])...)
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
		}
	}
	return nil
}

// sharedResume is a resume job built once for the package, with the
// output of its uninterrupted run, run once (the reference of every
// resume test on its transport).
type sharedResume struct {
	built, ran sync.Once
	job        resumeJob
	whole      string
	buildErr   error
	runErr     error
}

var embeddedShared, mpiShared sharedResume

// get builds the job (under binDir, in sub, with the environment
// variables and tags given) and runs it once.
func (s *sharedResume) get(t *testing.T, sub string, env []string, buildEnv []string, tags ...string) (resumeJob, string) {
	t.Helper()
	s.build(t, sub, env, buildEnv, tags...)
	s.ran.Do(func() {
		var stdout, stderr bytes.Buffer
		cmd := s.job.command(filepath.Join(s.job.dir, "whole"))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || !finalHash.Match(stdout.Bytes()) {
			s.runErr = fmt.Errorf("the uninterrupted run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		s.whole = stdout.String()
	})
	if s.runErr != nil {
		t.Fatal(s.runErr)
	}
	return s.job.own(t), s.whole
}

// build builds the job's binaries once.
func (s *sharedResume) build(t *testing.T, sub string, env []string, buildEnv []string, tags ...string) {
	t.Helper()
	build(t) // binDir
	s.built.Do(func() {
		s.job = resumeJob{dir: filepath.Join(binDir, sub), env: env}
		s.buildErr = buildResume(s.job.dir, buildEnv, tags...)
	})
	if s.buildErr != nil {
		t.Fatal(s.buildErr)
	}
}

// own is j with binaries of the test's own (links to j's), so that every
// process of the test's jobs, and only those, mention its directory: the
// tests that kill a job's processes by their command lines run in
// parallel.
func (j resumeJob) own(t *testing.T) resumeJob {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"gohorovodrun", "mnist"} {
		if err := os.Link(filepath.Join(j.dir, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	j.dir = dir
	return j
}

// embeddedEnv is the environment of the jobs over the embedded
// transport: a PATH with no mpirun, nor anything else.
func embeddedEnv(t *testing.T) []string {
	empty := filepath.Join(binDir, "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	return append(withoutEnv(os.Environ(), "PATH", "GOHOROVOD_MPIRUN"), "PATH="+empty)
}

// embeddedResume returns the resume job over the embedded transport
// (CGO_ENABLED=0 builds, no mpirun on PATH), built once under binDir, and
// the output of its uninterrupted run.
func embeddedResume(t *testing.T) (resumeJob, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	build(t) // binDir
	return embeddedShared.get(t, "resume", embeddedEnv(t), []string{"CGO_ENABLED=0"})
}

// mpiResume returns the resume job under the real mpirun (mnist built
// with the mpi tag), built once under binDir, and the output of its
// uninterrupted run.
func mpiResume(t *testing.T) (resumeJob, string) {
	t.Helper()
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not on PATH (make deps installs Open MPI)")
	}
	if _, err := exec.LookPath("mpicc"); err != nil || !cgoEnabled() {
		t.Skip("mpicc not on PATH or cgo disabled: no -tags mpi build")
	}
	return mpiShared.get(t, "resume-mpi", os.Environ(), nil, "-tags", "mpi")
}

// TestE2EMNISTResumeEmbedded: the job over the embedded transport
// (CGO_ENABLED=0 builds, no mpirun on PATH).
func TestE2EMNISTResumeEmbedded(t *testing.T) {
	t.Parallel()
	j, whole := embeddedResume(t)
	j.checkResume(t, whole, false)
}

// TestE2EMNISTResumeDamaged: as TestE2EMNISTResumeEmbedded, with the
// newest checkpoint truncated after the kill (a write cut short by a
// dying disk): the rerun names it, resumes from the one before, and still
// ends with the uninterrupted run's parameters.
func TestE2EMNISTResumeDamaged(t *testing.T) {
	t.Parallel()
	j, whole := embeddedResume(t)
	j.checkResume(t, whole, true)
}

// TestE2EMNISTResumeElastic: an elastic job (on the embedded transport)
// that loses every worker at once resumes from the commit it persisted
// last, and ends as the uninterrupted elastic job does.
func TestE2EMNISTResumeElastic(t *testing.T) {
	t.Parallel()
	j, _ := embeddedResume(t)
	j.elastic = true
	j.checkResume(t, j.run(t, t.TempDir()), false)
}

// TestE2EMNISTResumeMPI: the job under the real mpirun (mnist built with
// the mpi tag).
func TestE2EMNISTResumeMPI(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	t.Parallel()
	j, whole := mpiResume(t)
	j.checkResume(t, whole, false)
}
