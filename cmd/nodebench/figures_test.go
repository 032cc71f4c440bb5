package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestParseTimesReadsEveryPathsLines(t *testing.T) {
	out := `[1,0]<stdout>:impl=direct-mpi case=64MiB tensors=1 median_ms=9.0
[1,0]<stdout>:impl=runtime transport=mpi case=64MiB tensors=1 bytes=67108864 median_ms=571.5 min_ms=570
impl=runtime transport=embedded case=resnet50 bytes=102228128 median_ms=880.25 min_ms=870
impl=raw-mpi case=4MB bytes=4096000 ranks=2 iters=5 median_ms=35.5 min_ms=34
transport=torch-gloo np=3 case=4KiBx1000 bytes=4096000 ms=3905.723 algbw_GBps=0.001
gohorovodrun: node 1 of 2: joined node 0 at m2-0:29511
`
	got := parseTimes(out)
	want := map[string]float64{"64MiB": 571.5, "resnet50": 880.25, "4MB": 35.5, "4KiBx1000": 3905.723}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
}

func TestBoundIsTheRingsTime(t *testing.T) {
	// 2 nodes at 1 Gbit/s: each rank sends half the buffer twice, 64 MiB in
	// 536.9 ms; 3 nodes: 4/3 of it, 715.8 ms.
	if b := bound(64<<20, 2, 1e9); math.Abs(b-536.87) > 0.01 {
		t.Errorf("2 nodes: %.2f ms", b)
	}
	if b := bound(64<<20, 3, 1e9); math.Abs(b-715.83) > 0.01 {
		t.Errorf("3 nodes: %.2f ms", b)
	}
	if bound(1, 1, 1e9) != 0 || bound(1, 2, 0) != 0 {
		t.Error("no bound for one node or an unshaped link")
	}
}

func TestPrintGivesSharesAndRatios(t *testing.T) {
	r := &result{nodes: 2, perNode: 1, rate: 1e9, paths: []string{"embedded", "mpirun"}, cases: []string{"64MiB", "4KiBx1000", "4MB"}}
	r.add("embedded", map[string]float64{"64MiB": 600, "4KiBx1000": 50, "4MB": 40})
	r.add("embedded", map[string]float64{"64MiB": 560, "4KiBx1000": 52, "4MB": 40})
	r.add("embedded", map[string]float64{"64MiB": 580, "4KiBx1000": 48, "4MB": 40})
	r.add("mpirun", map[string]float64{"64MiB": 1160})
	var b bytes.Buffer
	r.print(&b, "1gbit")
	out := b.String()
	for _, want := range []string{
		"path=embedded case=64MiB bytes=67108864 rounds=3 time_ms=580.0",
		"of_bound=0.926", "rounds_ms=600.0,560.0,580.0",
		"case=64MiB ratio mpirun/embedded=2.000",
		"path=embedded ratio 4KiBx1000/4MB=1.250",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
