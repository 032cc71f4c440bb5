package timeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readJSON(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ev []map[string]any
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("not valid JSON: %v\n%s", err, b)
	}
	return ev
}

func TestValidAfterEveryFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tl.json")
	t0 := time.Unix(1000, 0)
	tl, err := Open(path, t0, true)
	if err != nil {
		t.Fatal(err)
	}
	if ev := readJSON(t, path); len(ev) != 1 {
		t.Fatalf("header: %v", ev)
	}
	tl.MarkCycle(t0.Add(time.Millisecond))
	tl.NegotiateStart("allreduce.w", "ALLREDUCE", t0.Add(time.Millisecond))
	tl.NegotiateRankReady("allreduce.w", 0, t0.Add(time.Millisecond))
	tl.NegotiateRankReady("allreduce.w", 1, t0.Add(2*time.Millisecond))
	tl.NegotiateEnd("allreduce.w", t0.Add(2*time.Millisecond))
	if err := tl.Flush(); err != nil {
		t.Fatal(err)
	}
	readJSON(t, path)
	tl.Start("allreduce.w", "ALLREDUCE", t0.Add(3*time.Millisecond))
	tl.ActivityStart("allreduce.w", "MPI_ALLREDUCE", t0.Add(3*time.Millisecond))
	tl.ActivityEnd("allreduce.w", t0.Add(4*time.Millisecond))
	tl.End("allreduce.w", "float32", "[3]", t0.Add(4*time.Millisecond))
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	ev := readJSON(t, path)
	b, _ := os.ReadFile(path)
	for _, want := range []string{"allreduce.w", "NEGOTIATE_ALLREDUCE", `"ALLREDUCE"`, "CYCLE_START", "MPI_ALLREDUCE", `"dtype":"float32"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("trace lacks %s", want)
		}
	}
	// Begin and end events balance per row.
	depth := map[float64]int{}
	for _, e := range ev {
		switch e["ph"] {
		case "B":
			depth[e["pid"].(float64)]++
		case "E":
			depth[e["pid"].(float64)]--
		}
	}
	for pid, d := range depth {
		if d != 0 {
			t.Errorf("row %v: unbalanced spans (%d)", pid, d)
		}
	}
}
