package launch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeMPIRun writes a shell script that answers --version like Open MPI
// and otherwise records its argv and environment in dir, then fails as
// FAKE_FAIL asks (printing Open MPI's report for rank FAKE_FAIL_RANK).
func fakeMPIRun(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "mpirun")
	script := `#!/bin/sh
if [ "$1" = "--version" ]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi
printf '%s\n' "$@" > "` + dir + `/argv"
env > "` + dir + `/env"
if [ -n "$FAKE_FAIL" ]; then
  printf '  Process name: [[1,1],%s]\n  Exit code:    %s\n' "$FAKE_FAIL_RANK" "$FAKE_FAIL" >&2
  exit "$FAKE_FAIL"
fi
echo "ran"
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

type fixture struct {
	dir      string
	prog     string
	l        *Launcher
	out, err bytes.Buffer
	mu       sync.Mutex
	ssh      [][]string
}

func newFixture(t *testing.T, env ...string) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	mpirun := fakeMPIRun(t, f.dir)
	f.prog = filepath.Join(f.dir, "train")
	if err := os.WriteFile(f.prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.l = &Launcher{
		Stdout: &f.out, Stderr: &f.err,
		Environ: append([]string{"PATH=/usr/bin:/bin"}, env...),
		LookPath: func(name string) (string, error) {
			if name == "mpirun" {
				return mpirun, nil
			}
			return exec.LookPath(name)
		},
		IsLocal: func(h string) bool { return h == "localhost" },
		SSH: func(ctx context.Context, argv []string) ([]byte, error) {
			f.mu.Lock()
			f.ssh = append(f.ssh, argv)
			f.mu.Unlock()
			if argv[len(argv)-2] == "down" {
				return []byte("No route to host"), errors.New("exit status 255")
			}
			return nil, nil
		},
		SSHRetry: time.Nanosecond,
		CPUs:     8,
		Build: BuildInfo{MPIBuiltIn: true, MPILibrary: "Open MPI",
			MPIVersion: func() string { return "Open MPI v4.1.4\nmore" }},
	}
	return f
}

func (f *fixture) ran() bool {
	_, err := os.Stat(filepath.Join(f.dir, "argv"))
	return err == nil
}

func (f *fixture) file(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunRefusesBadInput(t *testing.T) {
	tests := []struct {
		name    string
		args    func(f *fixture) []string
		env     []string
		wantErr string
	}{
		{"program missing", func(f *fixture) []string { return []string{"-np", "2", f.dir + "/nope"} }, nil, "does not exist (build it first, e.g. go build -tags mpi -o "},
		{"program missing, embedded transport", func(f *fixture) []string { return []string{"--gloo", "-np", "2", f.dir + "/nope"} }, nil,
			"does not exist (build it first, e.g. go build -o "},
		{"program not on PATH", func(f *fixture) []string { return []string{"-np", "2", "no-such-program-xyz"} }, nil, "not found on PATH"},
		{"program not executable", func(f *fixture) []string {
			os.Chmod(f.prog, 0o644)
			return []string{"-np", "2", f.prog}
		}, nil, "not executable"},
		{"hostfile unreadable", func(f *fixture) []string { return []string{"-np", "2", "--hostfile", f.dir + "/nohosts", f.prog} }, nil, "cannot read --hostfile"},
		{"more processes than slots", func(f *fixture) []string { return []string{"-np", "5", "-H", "localhost:4", f.prog} }, nil, "more processes (5)"},
		{"malformed -H", func(f *fixture) []string { return []string{"-np", "2", "-H", "localhost", f.prog} }, nil, "host:slots"},
		{"no -np", func(f *fixture) []string { return []string{f.prog} }, nil, "-np is required"},
		{"bad knob in the environment", func(f *fixture) []string { return []string{"-np", "2", f.prog} },
			[]string{"HOROVOD_CYCLE_TIME=soon"}, "HOROVOD_CYCLE_TIME=\"soon\""},
		{"negative knob in the environment", func(f *fixture) []string { return []string{"-np", "2", f.prog} },
			[]string{"HOROVOD_FUSION_THRESHOLD=-1"}, "must be >= 0"},
		{"unknown flag", func(f *fixture) []string { return []string{"-np", "2", "--nope", f.prog} }, nil, "unknown flag"},
		{"bad SLURM allocation", func(f *fixture) []string { return []string{f.prog} }, []string{"SLURM_JOB_NODELIST=n[1-"}, "SLURM allocation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.env...)
			err := f.l.Run(context.Background(), tt.args(f))
			if ExitCode(err) != 2 || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Run = %v (exit %d), want exit 2 and %q", err, ExitCode(err), tt.wantErr)
			}
			if f.ran() {
				t.Errorf("mpirun was started despite bad input")
			}
		})
	}
}

func TestRunLaunches(t *testing.T) {
	f := newFixture(t, "HOROVOD_CACHE_CAPACITY=7", "MY_VAR=1")
	err := f.l.Run(context.Background(), []string{"-np", "2", "--cycle-time-ms", "2.5", "--stall-check-shutdown-time-seconds", "5", f.prog, "-np", "x"})
	if err != nil {
		t.Fatalf("Run = %v (stderr %s)", err, f.err.String())
	}
	argv := strings.Split(strings.TrimSpace(f.file(t, "argv")), "\n")
	wantTail := []string{f.prog, "-np", "x"}
	if got := argv[len(argv)-3:]; strings.Join(got, " ") != strings.Join(wantTail, " ") {
		t.Errorf("mpirun argv ends %q, want %q", got, wantTail)
	}
	if !strings.Contains(strings.Join(argv, " "), "-np 2 -H localhost:2") {
		t.Errorf("mpirun argv %q", argv)
	}
	env := f.file(t, "env")
	for _, want := range []string{"HOROVOD_CYCLE_TIME=2.5\n", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=5\n", "HOROVOD_CACHE_CAPACITY=7\n", "MY_VAR=1\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("mpirun's environment lacks %q", want)
		}
	}
	if f.out.String() != "ran\n" {
		t.Errorf("stdout %q: the launcher printed something besides the job's output", f.out.String())
	}
}

func TestRunReportsFailingRank(t *testing.T) {
	f := newFixture(t, "FAKE_FAIL=3", "FAKE_FAIL_RANK=1")
	err := f.l.Run(context.Background(), []string{"-np", "2", f.prog})
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || ExitCode(err) != 3 {
		t.Fatalf("Run = %v, want rank 1 with exit status 3", err)
	}
	if !strings.Contains(f.err.String(), "Exit code:    3") {
		t.Errorf("mpirun's report was not passed on to stderr: %q", f.err.String())
	}
}

func TestRunDryRunAndVerbose(t *testing.T) {
	f := newFixture(t)
	if err := f.l.Run(context.Background(), []string{"-np", "2", "--dry-run", "--cycle-time-ms", "3", f.prog}); err != nil {
		t.Fatal(err)
	}
	out := f.out.String()
	if !strings.HasPrefix(out, "HOROVOD_CYCLE_TIME=3 ") || !strings.Contains(out, "--tag-output -np 2 -H localhost:2") || !strings.HasSuffix(out, f.prog+"\n") {
		t.Errorf("dry run printed %q", out)
	}
	if f.ran() {
		t.Errorf("--dry-run started mpirun")
	}
	f = newFixture(t)
	if err := f.l.Run(context.Background(), []string{"-np", "1", "--verbose", f.prog}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.out.String(), "-np 1 -H localhost:1") || !f.ran() {
		t.Errorf("--verbose: printed %q, ran %v", f.out.String(), f.ran())
	}
}

func TestRunChecksRemoteHosts(t *testing.T) {
	f := newFixture(t)
	err := f.l.Run(context.Background(), []string{"-np", "3", "-H", "localhost:1,up:1,down:1,unused:1", f.prog})
	var ue *UnreachableError
	if !errors.As(err, &ue) || strings.Join(ue.Hosts, ",") != "down" {
		t.Fatalf("Run = %v, want host down unreachable", err)
	}
	if f.ran() {
		t.Errorf("mpirun started although a host is unreachable")
	}
	probed := map[string]bool{}
	for _, argv := range f.ssh {
		probed[argv[len(argv)-2]] = true
	}
	if probed["localhost"] || probed["unused"] || !probed["up"] || !probed["down"] {
		t.Errorf("probed %v: want the used remote hosts only", probed)
	}
}

func TestRunSlurm(t *testing.T) {
	f := newFixture(t, "SLURM_JOB_NODELIST=localhost", "SLURM_TASKS_PER_NODE=3")
	if err := f.l.Run(context.Background(), []string{f.prog}); err != nil {
		t.Fatal(err)
	}
	if argv := strings.ReplaceAll(f.file(t, "argv"), "\n", " "); !strings.Contains(argv, "-np 3 -H localhost:3") {
		t.Errorf("in a SLURM allocation of 3 tasks: mpirun %s", argv)
	}
}

func TestRunVersionAndCheckBuild(t *testing.T) {
	f := newFixture(t)
	if err := f.l.Run(context.Background(), []string{"--version"}); err != nil || f.out.String() != "gohorovodrun "+Version+"\n" {
		t.Errorf("--version: %v, %q", err, f.out.String())
	}
	tests := []struct {
		build BuildInfo
		want  []string
	}{
		{BuildInfo{MPIBuiltIn: true, MPILibrary: "Open MPI", MPIVersion: func() string { return "Open MPI v4.1.4\nx" }},
			[]string{"[X] MPI (links Open MPI)", "[ ] NCCL (not built)", "MPI library: Open MPI v4.1.4\n", "(Open MPI)"}},
		{BuildInfo{}, []string{"[ ] MPI (not built in: rebuild with -tags mpi)"}},
		{BuildInfo{MPIBuiltIn: true, MPILibrary: "MPICH"}, []string{"WARNING: this build links MPICH but mpirun is Open MPI"}},
		{BuildInfo{GPU: func() string { return "CUDA runtime 12.4\nNCCL 2.21.5 (/lib/libnccl.so)" }}, []string{"[X] NCCL (found at run time)", "CUDA runtime 12.4"}},
		{BuildInfo{GPU: func() string { return "CUDA runtime: unavailable\nNCCL: unavailable" }}, []string{"[ ] NCCL (built in; not found at run time)"}},
	}
	for _, tt := range tests {
		f := newFixture(t)
		f.l.Build = tt.build
		if err := f.l.Run(context.Background(), []string{"-cb"}); err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(f.out.String(), w) {
				t.Errorf("--check-build printed %q, lacking %q", f.out.String(), w)
			}
		}
	}
}

// TestRunElasticDryRun: an elastic job's --dry-run describes it and starts
// nothing; a driver setting it cannot meet is a usage error.
func TestRunElasticDryRun(t *testing.T) {
	f := newFixture(t)
	args := []string{"-np", "2", "--min-np", "1", "--max-np", "4", "--reset-limit", "3", "-H", "localhost:4", "--dry-run", f.prog}
	if err := f.l.Run(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	out := f.out.String()
	for _, want := range []string{"elastic job: -np 2, --min-np 1, --max-np 4; hosts from -H localhost:4", "reset limit 3", "HOROVOD_ELASTIC=1", f.prog} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run printed %q, without %q", out, want)
		}
	}
	if f.ran() {
		t.Errorf("--dry-run started something")
	}
}
