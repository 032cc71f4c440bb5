package timeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readTrace validates the file at path and returns it parsed.
func readTrace(t *testing.T, path string) *Trace {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := Read(f)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("%v\n%s", err, b)
	}
	return tr
}

// spans lists a row's spans as "name@depth[begin,end]".
func spans(r *Row) []string {
	var out []string
	for _, s := range r.Spans {
		out = append(out, fmt.Sprintf("%s@%d[%d,%d]", s.Name, s.Depth, s.Begin, s.End))
	}
	return out
}

func TestValidAfterEveryFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tl.json")
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tl, err := Open(path, t0, true)
	if err != nil {
		t.Fatal(err)
	}
	if tr := readTrace(t, path); len(tr.Rows) != 1 {
		t.Fatalf("header: %v", tr.Rows)
	}
	tl.MarkCycle(ms(1))
	tl.NegotiateStart("allreduce.w", "ALLREDUCE", ms(1))
	tl.NegotiateRankReady("allreduce.w", 0, ms(1))
	if err := tl.Flush(); err != nil {
		t.Fatal(err)
	}
	// Mid-negotiation the file is complete JSON but a span is open: the
	// validator says so.
	f, _ := os.Open(path)
	if err := Validate(f); err == nil || !strings.Contains(err.Error(), "never closed") {
		t.Errorf("open negotiation: Validate = %v, want a never-closed span", err)
	}
	f.Close()
	tl.MarkCycle(ms(2))
	tl.NegotiateRankReady("allreduce.w", 1, ms(2))
	tl.NegotiateEnd("allreduce.w", ms(2))
	if err := tl.Flush(); err != nil {
		t.Fatal(err)
	}
	readTrace(t, path)
	tl.Start("allreduce.w", "ALLREDUCE", ms(0), ms(3))
	tl.ActivityStart("allreduce.w", "MPI_ALLREDUCE", ms(3))
	tl.ActivityEnd("allreduce.w", ms(4))
	tl.End("allreduce.w", "float32", "[3]", ms(4))
	if err := tl.Close(ms(5)); err != nil {
		t.Fatal(err)
	}
	tr := readTrace(t, path)
	if tr.Cycles != 2 {
		t.Errorf("%d cycle marks, want 2", tr.Cycles)
	}
	row := tr.Row("allreduce.w")
	if row == nil {
		t.Fatal("no row for allreduce.w")
	}
	got := strings.Join(spans(row), " ")
	want := "0@1[1000,1000] 1@1[2000,2000] NEGOTIATE_ALLREDUCE@0[1000,2000] MPI_ALLREDUCE@1[3000,4000] ALLREDUCE@0[3000,4000]"
	if got != want {
		t.Errorf("spans\n got %s\nwant %s", got, want)
	}
	if a := row.Spans[len(row.Spans)-1].Args; a["dtype"] != "float32" || a["shape"] != "[3]" {
		t.Errorf("end args %v", a)
	}
	if tl.Repairs() != 0 {
		t.Errorf("%d repairs", tl.Repairs())
	}
}

// TestScripted drives the writer the way the runtime does, over a few
// cycles: a negotiated single allreduce, a fused pair negotiated in the
// same cycle sharing activity times, the same names again from the cache,
// a name submitted before the timeline opened, a negotiation that began
// before it opened, and one still open when it closes.
func TestScripted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tl.json")
	t0 := time.Unix(1000, 0)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n*1000) * time.Microsecond) }
	tl, err := Open(path, t0, true)
	if err != nil {
		t.Fatal(err)
	}
	op := func(names []string, enq []time.Time, start, t1, t2, end time.Time) {
		for i, n := range names {
			tl.Start(n, "ALLREDUCE", enq[i], start)
		}
		if len(names) == 1 {
			tl.ActivityStart(names[0], "MPI_ALLREDUCE", start)
			tl.ActivityEnd(names[0], end)
		} else {
			for _, a := range []struct {
				act  string
				s, e time.Time
			}{{"MEMCPY_IN_FUSION_BUFFER", start, t1}, {"MPI_ALLREDUCE", t1, t2}, {"MEMCPY_OUT_FUSION_BUFFER", t2, end}} {
				for _, n := range names {
					tl.ActivityStart(n, a.act, a.s)
					tl.ActivityEnd(n, a.e)
				}
			}
		}
		for _, n := range names {
			tl.End(n, "float32", "[2]", end)
		}
	}
	// A negotiation that began before this timeline: only its end and a
	// rank's arrival come here.
	tl.NegotiateRankReady("allreduce.early", 1, ms(0.5))
	tl.NegotiateEnd("allreduce.early", ms(0.5))
	op([]string{"allreduce.early"}, []time.Time{t0.Add(-time.Second)}, ms(0.6), time.Time{}, time.Time{}, ms(0.7))
	// A cached name submitted before the timeline opened: its wait is
	// drawn from the start.
	op([]string{"allreduce.old"}, []time.Time{t0.Add(-time.Second)}, ms(0.6), time.Time{}, time.Time{}, ms(0.7))

	// Cycle 1: rank 1 submits a, f1, f2; rank 0 submitted a at 0.2 ms.
	tl.MarkCycle(ms(1))
	for _, n := range []string{"allreduce.a", "allreduce.f1", "allreduce.f2"} {
		tl.NegotiateStart(n, "ALLREDUCE", ms(1.1))
		tl.NegotiateRankReady(n, 1, ms(1.1))
	}
	tl.NegotiateRankReady("allreduce.a", 0, ms(1.1))
	// Cycle 2: rank 0 submits f1, f2 (enqueued at 1.5 ms); all ready. The
	// negotiations end and the operations start in the same cycle.
	tl.MarkCycle(ms(2))
	for _, n := range []string{"allreduce.a", "allreduce.f1", "allreduce.f2"} {
		if n != "allreduce.a" {
			tl.NegotiateRankReady(n, 0, ms(2.1))
		}
		tl.NegotiateEnd(n, ms(2.1))
	}
	op([]string{"allreduce.a"}, []time.Time{ms(0.2)}, ms(2.2), time.Time{}, time.Time{}, ms(2.3))
	op([]string{"allreduce.f1", "allreduce.f2"}, []time.Time{ms(1.5), ms(1.5)}, ms(2.3), ms(2.4), ms(2.5), ms(2.6))
	// Cycle 3: all three again, from the cache, fused.
	tl.MarkCycle(ms(3))
	names := []string{"allreduce.a", "allreduce.f1", "allreduce.f2"}
	op(names, []time.Time{ms(2.7), ms(2.8), ms(2.8)}, ms(3.2), ms(3.3), ms(3.4), ms(3.5))
	// Cycle 4: a negotiation that does not finish before the timeline
	// closes.
	tl.MarkCycle(ms(4))
	tl.NegotiateStart("broadcast.b", "BROADCAST", ms(4.1))
	tl.NegotiateRankReady("broadcast.b", 1, ms(4.1))
	if err := tl.Close(ms(5)); err != nil {
		t.Fatal(err)
	}
	if tl.Repairs() != 0 {
		t.Errorf("%d repairs: the script reports times in order", tl.Repairs())
	}
	tr := readTrace(t, path)
	if tr.Cycles != 4 {
		t.Errorf("%d cycles, want 4", tr.Cycles)
	}
	want := map[string]string{
		"allreduce.early": "1@0[500,500] MPI_ALLREDUCE@1[600,700] ALLREDUCE@0[600,700]",
		"allreduce.old":   "QUEUE@0[0,600] MPI_ALLREDUCE@1[600,700] ALLREDUCE@0[600,700]",
		"allreduce.a": "1@1[1100,1100] 0@1[1100,1100] NEGOTIATE_ALLREDUCE@0[1100,2100] " +
			"MPI_ALLREDUCE@1[2200,2300] ALLREDUCE@0[2200,2300] " +
			"QUEUE@0[2700,3200] MEMCPY_IN_FUSION_BUFFER@1[3200,3300] MPI_ALLREDUCE@1[3300,3400] MEMCPY_OUT_FUSION_BUFFER@1[3400,3500] ALLREDUCE@0[3200,3500]",
		"allreduce.f1": "1@1[1100,1100] 0@1[2100,2100] NEGOTIATE_ALLREDUCE@0[1100,2100] " +
			"MEMCPY_IN_FUSION_BUFFER@1[2300,2400] MPI_ALLREDUCE@1[2400,2500] MEMCPY_OUT_FUSION_BUFFER@1[2500,2600] ALLREDUCE@0[2300,2600] " +
			"QUEUE@0[2800,3200] MEMCPY_IN_FUSION_BUFFER@1[3200,3300] MPI_ALLREDUCE@1[3300,3400] MEMCPY_OUT_FUSION_BUFFER@1[3400,3500] ALLREDUCE@0[3200,3500]",
		"broadcast.b": "1@1[4100,4100] NEGOTIATE_BROADCAST@0[4100,5000]",
	}
	for name, w := range want {
		row := tr.Row(name)
		if row == nil {
			t.Errorf("no row %s", name)
			continue
		}
		if got := strings.Join(spans(row), " "); got != w {
			t.Errorf("%s:\n got %s\nwant %s", name, got, w)
		}
	}
	// f2 is drawn like f1: a fused response shows each tensor on its row
	// with the same activity times.
	if a, b := spans(tr.Row("allreduce.f1")), spans(tr.Row("allreduce.f2")); strings.Join(a, " ") != strings.Join(b, " ") {
		t.Errorf("fused rows differ:\n%v\n%v", a, b)
	}
}

// TestGuard shows the writer's guard at work: times out of order on a row
// are drawn at the row's latest, an end with nothing open is dropped, and
// both are counted; the file stays valid.
func TestGuard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tl.json")
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tl, err := Open(path, t0, true)
	if err != nil {
		t.Fatal(err)
	}
	tl.Start("x", "ALLREDUCE", time.Time{}, ms(5))
	tl.ActivityStart("x", "MPI_ALLREDUCE", ms(3)) // backwards
	tl.ActivityEnd("x", ms(6))
	tl.End("x", "float32", "[1]", ms(6))
	tl.ActivityEnd("x", ms(7)) // nothing open
	tl.MarkCycle(ms(8))
	tl.MarkCycle(ms(7)) // backwards
	tl.Start("y", "ALLREDUCE", time.Time{}, ms(9))
	if err := tl.Close(ms(10)); err != nil { // closes y's span
		t.Fatal(err)
	}
	if tl.Repairs() != 3 {
		t.Errorf("%d repairs, want 3", tl.Repairs())
	}
	tr := readTrace(t, path)
	if got := strings.Join(spans(tr.Row("x")), " "); got != "MPI_ALLREDUCE@1[5000,6000] ALLREDUCE@0[5000,6000]" {
		t.Errorf("x: %s", got)
	}
	if got := strings.Join(spans(tr.Row("y")), " "); got != "ALLREDUCE@0[9000,10000]" {
		t.Errorf("y: %s", got)
	}
}

func TestOpenFails(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir.json"), time.Now(), false); err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
}

func TestNoCycleMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tl.json")
	tl, err := Open(path, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	tl.MarkCycle(time.Now())
	if err := tl.Close(time.Now()); err != nil {
		t.Fatal(err)
	}
	if tr := readTrace(t, path); tr.Cycles != 0 {
		t.Errorf("%d cycle marks without markCycles", tr.Cycles)
	}
}
