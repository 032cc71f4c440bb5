package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMpirunScriptSingleCopy: scripts/mpirun.sh chooses Open MPI's
// single-copy mechanism from GOHOROVOD_MPI_SINGLE_COPY with the launcher's
// probe (a fake launcher here, and a fake mpirun that prints its
// arguments): none without probing, auto following the probe (with its
// note when it fails), cma refused when the probe refuses it or there is
// no launcher to probe with.
func TestMpirunScriptSingleCopy(t *testing.T) {
	script, err := filepath.Abs("../../scripts/mpirun.sh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("mpirun", `echo "mpirun $*"`+"\n")
	probed := filepath.Join(dir, "probed")
	works := write("works", `echo called >> `+probed+`
echo "/usr/bin/mpirun -np 1 -mca btl_vader_single_copy_mechanism cma true"
`)
	broken := write("broken", `echo called >> `+probed+`
echo "gohorovodrun: --mpi-single-copy=auto: copying through shared memory: process_vm_readv: operation not permitted" >&2
echo "/usr/bin/mpirun -np 1 -mca btl_vader_single_copy_mechanism none true"
`)
	refuses := write("refuses", `echo called >> `+probed+`
echo "gohorovodrun: --mpi-single-copy=cma: process_vm_readv: operation not permitted" >&2
exit 2
`)
	tests := []struct {
		name, mode, launcher string
		wantMech, wantErr    string
		wantProbe            bool
	}{
		{"unset", "", works, "none", "", false},
		{"none", "none", works, "none", "", false},
		{"auto where it works", "auto", works, "cma", "", true},
		{"auto where it does not", "auto", broken, "none", "operation not permitted", true},
		{"auto with no launcher", "auto", filepath.Join(dir, "missing"), "none", "no launcher", false},
		{"cma where it works", "cma", works, "cma", "", true},
		{"cma where it does not", "cma", refuses, "", "operation not permitted", true},
		{"cma with no launcher", "cma", filepath.Join(dir, "missing"), "", "no launcher", false},
		{"bad mode", "fast", works, "", "want none, cma or auto", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(probed)
			cmd := exec.Command("bash", script, "2", "prog", "arg")
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "GOHOROVODRUN="+tc.launcher,
				"GOHOROVOD_MPI_SINGLE_COPY="+tc.mode)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			_, statErr := os.Stat(probed)
			if probe := statErr == nil; probe != tc.wantProbe {
				t.Errorf("probed %v, want %v", probe, tc.wantProbe)
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.wantErr)
			}
			if tc.wantMech == "" {
				if err == nil {
					t.Fatalf("ran %q, want a refusal", out)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			want := "--mca btl_vader_single_copy_mechanism " + tc.wantMech + " "
			if !strings.Contains(string(out), want) || !strings.HasSuffix(strings.TrimSpace(string(out)), "-np 2 prog arg") {
				t.Errorf("mpirun got %q, want %q and -np 2 prog arg", out, want)
			}
		})
	}
}
