package launch_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestE2EMNISTWithoutMPI: with no mpirun on
// PATH, a CGO_ENABLED=0 build of the launcher and of the MNIST example
// trains on 4 processes over the embedded transport to at least 97% test
// accuracy. Nothing here needs MPI or a C compiler.
func TestE2EMNISTWithoutMPI(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end launch tests skipped in -short mode")
	}
	t.Parallel()
	embeddedShared.build(t, "resume", embeddedEnv(t), []string{"CGO_ENABLED=0"})
	j := embeddedShared.job.own(t)
	cmd := exec.Command(filepath.Join(j.dir, "gohorovodrun"), "-np", "4", filepath.Join(j.dir, "mnist"), "--epochs", "3")
	cmd.Env = j.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("gohorovodrun -np 4 mnist: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("4 ranks, 3 epochs over the embedded transport in %v", time.Since(start).Round(time.Millisecond))
	if !bytes.Contains(stderr.Bytes(), []byte("embedded transport")) {
		t.Errorf("the launcher did not say it chose the embedded transport:\n%s", stderr.String())
	}
	m := regexp.MustCompile(`epoch 3: .*test accuracy ([0-9.]+)%`).FindSubmatch(stdout.Bytes())
	if m == nil {
		t.Fatalf("no third epoch in the output:\n%s", stdout.String())
	}
	acc, _ := strconv.ParseFloat(string(m[1]), 64)
	if acc < 97 {
		t.Fatalf("test accuracy %.2f%%, want at least 97%%:\n%s", acc, stdout.String())
	}
	if !bytes.Contains(stdout.Bytes(), []byte("mnist: 4 ranks")) {
		t.Fatalf("not 4 ranks:\n%s", stdout.String())
	}
}

// withoutEnv drops the variables named from env.
func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		keep := true
		for _, n := range names {
			if len(kv) > len(n) && kv[:len(n)+1] == n+"=" {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
