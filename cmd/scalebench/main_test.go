package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/internal/scaling"
)

// TestBoundAtTheJobsCoresPerRank: the job's ranks and the bound's
// independent copies run with the same GOMAXPROCS (cores over np), so that
// the bound differs from the job only in communication. The fake program
// prints its GOMAXPROCS as its samples/s.
func TestBoundAtTheJobsCoresPerRank(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	env := []string{scaling.CoreShareEnv(16, 4)}
	prog := []string{"-c", `echo "epoch 1: x $GOMAXPROCS samples/s"`}
	bound, cpu, err := independent(env, 3, "sh", prog)
	if err != nil {
		t.Fatal(err)
	}
	if bound != 3*4 || cpu != 0 {
		t.Fatalf("3 copies summed %v samples/s (CPU %v, none printed), want 3 x GOMAXPROCS 4", bound, cpu)
	}
	// The launcher is run as LAUNCHER NP PROGRAM ARGS...: this one drops NP
	// and runs the program once.
	launcher := filepath.Join(t.TempDir(), "launcher")
	if err := os.WriteFile(launcher, []byte("#!/bin/sh\nshift\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, cpu, err := launched(env, launcher, 4, "sh", []string{"-c", `echo "epoch 2: x $GOMAXPROCS samples/s"`})
	if err != nil {
		t.Fatal(err)
	}
	if got != 4 || cpu != 0 {
		t.Fatalf("the job ran at GOMAXPROCS %v (CPU %v, none printed), want 4", got, cpu)
	}
	got, cpu, err = launched(env, launcher, 4, "sh", []string{"-c", `echo "epoch 2: x $GOMAXPROCS samples/s  0.25 CPU-ms/sample (all ranks)"`})
	if err != nil || got != 4 || cpu != 0.25 {
		t.Fatalf("launched = %v, %v, %v; want 4 samples/s, 0.25 CPU-ms/sample", got, cpu, err)
	}
}

// TestMain runs scalebench's main instead of the tests when
// SCALEBENCH_RUN_MAIN is set, so that a test can run the command whole.
func TestMain(m *testing.M) {
	if os.Getenv("SCALEBENCH_RUN_MAIN") != "" {
		os.Args = append([]string{"scalebench"}, strings.Fields(os.Getenv("SCALEBENCH_RUN_MAIN"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakes writes a fake launcher and program (shell scripts: the launcher
// is run as LAUNCHER NP PROGRAM ARGS...) into a temporary directory and
// returns their paths; it skips the test where there is no sh.
func fakes(t *testing.T, launcher, prog string) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "launcher"), filepath.Join(dir, "prog")}
	for i, body := range []string{launcher, prog} {
		if err := os.WriteFile(paths[i], []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return paths[0], paths[1]
}

// runMain runs scalebench's main in a child process (TestMain) with args,
// and returns what it printed on stdout, or with combined, stdout and
// stderr together.
func runMain(args string, combined bool) ([]byte, error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "SCALEBENCH_RUN_MAIN="+args)
	if combined {
		return cmd.CombinedOutput()
	}
	return cmd.Output()
}

// TestCPURatioLines runs scalebench on a fake launcher and program whose
// CPU per sample is 0.05 ms run alone (the bound's copies), 0.07 ms at
// np 1 under the launcher, and 0.06, 0.055 and 0.06 ms at np 2 in its
// three rounds: the table has the CPU columns, and the lines for scripts
// have each np's median ratio over the rounds against the bound's copies
// (not against np 1's job).
func TestCPURatioLines(t *testing.T) {
	launcher, prog := fakes(t, "FAKE_NP=$1 exec sh \"$2\"\n", `c=0.05
[ "${FAKE_NP:-}" = 1 ] && c=0.07
if [ "${FAKE_NP:-}" = 2 ]; then
	n=$(cat "$0.count" 2>/dev/null || echo 0); echo $((n+1)) > "$0.count"
	c=0.055; [ $((n % 2)) = 0 ] && c=0.06
fi
echo "epoch 1: x 100 samples/s  $c CPU-ms/sample (all ranks)  lr 0"
`)
	out, err := runMain("-max-np 2 -rounds 3 -png= -launcher "+launcher+" -program "+prog, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// np 2's job runs once a round: 0.06, 0.055, 0.06, a median ratio
	// of 1.2.
	if !strings.Contains(string(out), "CPU vs bound") || !strings.Contains(string(out), "np=1 cpu_per_sample_ratio=1.40\n") {
		t.Fatalf("output:\n%s", out)
	}
	var ratio float64
	for _, line := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(line, "np=2 cpu_per_sample_ratio=%f", &ratio); err == nil {
			break
		}
	}
	if ratio != 1.2 {
		t.Fatalf("np 2's ratio %v, want 1.20 (the median of rounds at 0.06, 0.055, 0.06 over the bound's 0.05):\n%s", ratio, out)
	}
}

// TestVariants runs scalebench with two -variant flags on a fake program
// whose CPU per sample is its V variable over 1000 (0.05 ms without it, as
// the bound's copies run): each variant gets its own table and ratio lines,
// in order, against the same bound.
func TestVariants(t *testing.T) {
	launcher, prog := fakes(t, "exec sh \"$2\"\n", `c=0.05
[ -n "${V:-}" ] && c=$(echo "$V" | awk '{print $1/1000}')
echo "epoch 1: x 100 samples/s  $c CPU-ms/sample (all ranks)  lr 0"
`)
	out, err := runMain("-max-np 1 -rounds 2 -png= -variant V=10 -variant V=30 -launcher "+launcher+" -program "+prog, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	a, b := strings.Index(s, "[V=10]"), strings.Index(s, "[V=30]")
	ra, rb := strings.Index(s, "np=1 cpu_per_sample_ratio=0.20\n"), strings.Index(s, "np=1 cpu_per_sample_ratio=0.60\n")
	if a < 0 || b < 0 || ra < 0 || rb < 0 || !(a < ra && ra < b && b < rb) {
		t.Fatalf("want V=10's table and ratio 0.20, then V=30's and 0.60:\n%s", s)
	}
	// A variant that runs another program: its figures are that
	// program's.
	prog2 := filepath.Join(filepath.Dir(prog), "prog2")
	if err := os.WriteFile(prog2, []byte("#!/bin/sh\necho \"epoch 1: x 100 samples/s  0.2 CPU-ms/sample (all ranks)  lr 0\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = runMain("-max-np 1 -rounds 1 -png= -variant V=10 -variant SCALEBENCH_PROGRAM="+prog2+" -launcher "+launcher+" -program "+prog, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "np=1 cpu_per_sample_ratio=0.20\n") || !strings.Contains(string(out), "np=1 cpu_per_sample_ratio=4.00\n") {
		t.Fatalf("want ratio 0.20 for V=10 and 4.00 for the other program:\n%s", out)
	}
	var f variantFlag
	if err := f.Set("A=1 B"); err == nil {
		t.Fatal("a setting without = was accepted")
	}
	if err := f.Set(" "); err == nil {
		t.Fatal("an empty variant was accepted")
	}
}

// TestMinNP runs scalebench from np 2 only (-min-np): no np 1 line, and the
// ideal columns read "-"; a smallest np above the largest is refused.
func TestMinNP(t *testing.T) {
	launcher, prog := fakes(t, "exec sh \"$2\"\n", "echo \"epoch 1: x 100 samples/s  0.05 CPU-ms/sample (all ranks)  lr 0\"\n")
	out, err := runMain("-min-np 2 -max-np 2 -rounds 1 -png= -launcher "+launcher+" -program "+prog, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	if strings.Contains(s, "np=1 ") || !strings.Contains(s, "np=2 cpu_per_sample_ratio=") || !strings.Contains(s, "            -") {
		t.Fatalf("want np 2 alone, without an ideal:\n%s", s)
	}
	if out, err := runMain("-min-np 4 -max-np 2 -png= -launcher "+launcher+" -program "+prog, true); err == nil || !strings.Contains(string(out), "-min-np 4") {
		t.Fatalf("-min-np above -max-np: err %v\n%s", err, out)
	}
}
