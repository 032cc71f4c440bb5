package main

import (
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// smokeNP is the smoke test's job size.
const smokeNP = 32

// TestScaleSmoke runs synthetic at np 32 under gohorovodrun --gloo, reads
// every rank's sockets while the job holds, and fails when a rank has more
// than 4·ceil(log2 np)+8 open sockets (a full mesh has two per peer) or
// when the job leaves anything in /dev/shm: the bound on what a rank holds
// as the job grows. One rank, rank 0, may hold np more: the liveness
// heartbeats are a star around it (one connection per rank).
func TestScaleSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("the scale smoke run is skipped in -short mode")
	}
	dir := t.TempDir()
	for _, b := range [][2]string{{"gohorovodrun", "../gohorovodrun"}, {"synthetic", "../../examples/synthetic"}} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b[0]), b[1]).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b[1], err, out)
		}
	}
	program := filepath.Join(dir, "synthetic")
	argv := append([]string{filepath.Join(dir, "gohorovodrun"), "--gloo", "-np", "32", program}, defaultArgs...)
	o, err := runJob(spec{argvs: [][]string{argv}, program: program, np: smokeNP, timeout: 3 * time.Minute, minAvail: 1 << 30})
	if err != nil {
		if o != nil {
			t.Logf("stderr: %s", o.stderr)
		}
		t.Fatal(err)
	}
	if !o.sampled || len(o.ranks) != smokeNP {
		t.Fatalf("sampled %d ranks in the hold, want %d", len(o.ranks), smokeNP)
	}
	limit := 4*int(math.Ceil(math.Log2(smokeNP))) + 8
	hub := 0 // the rank with the most sockets: rank 0, with the star
	for i, s := range o.ranks {
		if s.sockets > o.ranks[hub].sockets {
			hub = i
		}
	}
	for i, s := range o.ranks {
		want := limit
		if i == hub {
			want += smokeNP
		}
		if s.sockets > want {
			t.Errorf("pid %d: %d open sockets, want at most %d (4·ceil(log2 %d)+8, plus the liveness star's %d on rank 0)", s.pid, s.sockets, want, smokeNP, smokeNP)
		}
	}
	for _, l := range o.leftovers {
		if strings.HasPrefix(l, "/dev/shm/") {
			t.Errorf("left in /dev/shm: %s", l)
		}
	}
}
