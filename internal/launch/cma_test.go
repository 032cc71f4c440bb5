package launch

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSingleCopy: --mpi-single-copy decides Open MPI's single-copy
// mechanism from the probe: none never probes, cma needs the probe to
// pass, auto (the default) falls back to none with a note, and silently
// where the launcher has no probe; jobs beyond this host, the embedded
// transport and other MPIs are left alone or refused.
func TestSingleCopy(t *testing.T) {
	works := func() error { return nil }
	broken := func() error { return errors.New("process_vm_readv: operation not permitted") }
	tests := []struct {
		name    string
		args    []string
		probe   func() error
		wantCMA bool
		wantErr string
		wantLog string
		probed  bool
	}{
		{"default auto where it works", nil, works, true, "", "", true},
		{"default auto where it does not", nil, broken, false, "", "copying through shared memory: process_vm_readv", true},
		{"none", []string{"--mpi-single-copy", "none"}, works, false, "", "", false},
		{"cma where it works", []string{"--mpi-single-copy", "cma"}, works, true, "", "", true},
		{"cma where it does not", []string{"--mpi-single-copy", "cma"}, broken, false, "--mpi-single-copy=cma: process_vm_readv: operation not permitted", "", true},
		{"auto where it works", []string{"--mpi-single-copy", "auto"}, works, true, "", "", true},
		{"auto where it does not", []string{"--mpi-single-copy", "auto"}, broken, false, "", "copying through shared memory: process_vm_readv", true},
		{"auto with no probe", []string{"--mpi-single-copy", "auto"}, nil, false, "", "", false},
		{"cma with no probe", []string{"--mpi-single-copy", "cma"}, nil, false, "--mpi-single-copy=cma: no probe", "", false},
		{"remote hosts", []string{"--mpi-single-copy", "auto", "-H", "localhost:1,far:1"}, works, false, "", "", false},
		{"gloo refuses cma", []string{"--mpi-single-copy", "cma", "--gloo"}, works, false, "needs mpirun", "", false},
		{"gloo ignores auto", []string{"--mpi-single-copy", "auto", "--gloo"}, works, false, "", "", false},
		{"bad mode", []string{"--mpi-single-copy", "fast"}, works, false, `--mpi-single-copy "fast": want none, cma or auto`, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			probed := false
			if tc.probe != nil {
				f.l.ProbeCMA = func() error { probed = true; return tc.probe() }
			}
			o, err := Parse(append(append([]string{"-np", "2"}, tc.args...), f.prog), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := f.l.Spec(context.Background(), o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if spec.CMA != tc.wantCMA || probed != tc.probed {
				t.Errorf("CMA %v probed %v, want %v %v", spec.CMA, probed, tc.wantCMA, tc.probed)
			}
			if got := f.err.String(); tc.wantLog == "" && got != "" || !strings.Contains(got, tc.wantLog) {
				t.Errorf("stderr %q, want %q", got, tc.wantLog)
			}
		})
	}
}

// TestProbeCMAReader: the probe's reader fails, with the system's reason,
// on a process it cannot read, and on a buffer that is not the holder's.
func TestProbeCMAReader(t *testing.T) {
	err := cmaRead("999999999", "4096", "16")
	if err == nil || !strings.Contains(err.Error(), "process_vm_readv") {
		t.Errorf("no such process: %v", err)
	}
	// This process's own memory at a buffer of another pattern.
	other := make([]byte, 64)
	err = cmaReadAt(os.Getpid(), other)
	if err == nil || !strings.Contains(err.Error(), "not the holder's") {
		t.Errorf("wrong pattern: %v", err)
	}
	if err := cmaReadAt(os.Getpid(), cmaPattern(64)); err != nil {
		t.Errorf("own buffer: %v", err)
	}
}

// TestProbeCMA runs the probe itself (two copies of this test binary, as
// the launcher runs two copies of itself). Whether cross-memory attach
// works depends on the machine; the probe must say which, and when it
// fails, why, within the time a launcher can spend on it.
func TestProbeCMA(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	err = ProbeCMA(exe)
	if err != nil && !strings.Contains(err.Error(), "cross-memory attach does not work here: ") {
		t.Fatalf("probe failed without a reason: %v", err)
	}
	t.Logf("cross-memory attach here: %v", err)
	// A holder that cannot start is an error, not a hang.
	if err := ProbeCMA("/nonexistent/gohorovodrun"); err == nil {
		t.Error("a missing executable passed the probe")
	}
	// A copy that is not a probe (no CMAProbeMain) fails the probe.
	if _, err := exec.LookPath("true"); err == nil {
		if err := ProbeCMA("true"); err == nil {
			t.Error("true(1) passed the probe")
		}
	}
}
