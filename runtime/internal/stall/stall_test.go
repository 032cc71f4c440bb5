package stall

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func TestCheck(t *testing.T) {
	s, warn := New(Config{Warn: 60 * time.Second, Shutdown: 120 * time.Second})
	if warn != "" {
		t.Fatalf("unexpected warning %q", warn)
	}
	if s.Due(t0) {
		t.Fatal("due at the first call")
	}
	s.Observe("a", t0)
	s.Observe("b", t0.Add(30*time.Second))
	pending := map[string][]int{"a": {0, 2}, "b": {0}}
	if s.Due(t0.Add(59 * time.Second)) {
		t.Fatal("due before the warning time")
	}
	now := t0.Add(61 * time.Second)
	if !s.Due(now) {
		t.Fatal("not due after the warning time")
	}
	rep, ok := s.Check(now, 3, pending, nil)
	if !ok || rep.Shutdown {
		t.Fatalf("report %+v ok %v", rep, ok)
	}
	if !reflect.DeepEqual(rep.Missing, map[int][]string{1: {"a"}}) {
		t.Fatalf("missing %v", rep.Missing)
	}
	want := "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds."
	if !strings.HasPrefix(rep.Message, want) || !strings.Contains(rep.Message, "\nMissing ranks:\n1: [a]\nrank 1 ") {
		t.Fatalf("message %q", rep.Message)
	}
	// Later: both stalled, a past the shutdown time.
	rep, ok = s.Check(t0.Add(125*time.Second), 3, pending, nil)
	if !ok || !rep.Shutdown {
		t.Fatalf("no shutdown: %+v", rep)
	}
	if !strings.Contains(rep.Message, "\n1!: [a, b]") || !strings.Contains(rep.Message, "\n2: [b]") ||
		!strings.Contains(rep.Message, `One or more rank (marked by "!") is stalled for longer than 120 seconds. Will shutdown.`+"\nrank 1 ") {
		t.Fatalf("message %q", rep.Message)
	}
	s.Remove("a")
	s.Remove("b")
	if _, ok := s.Check(t0.Add(200*time.Second), 3, map[string][]int{}, nil); ok {
		t.Fatal("report with nothing pending")
	}
}

func TestManyNamesAndConfig(t *testing.T) {
	s, _ := New(Config{Warn: time.Second})
	pending := map[string][]int{}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		s.Observe(n, t0)
		pending[n] = []int{0}
	}
	rep, _ := s.Check(t0.Add(2*time.Second), 2, pending, nil)
	if !strings.Contains(rep.Message, "\n1: [a, b, c, d, e, f ...]\n") || rep.Shutdown {
		t.Fatalf("message %q", rep.Message)
	}
	if _, w := New(Config{Warn: 60 * time.Second, Shutdown: 5 * time.Second}); w != ShutdownIgnoredWarning {
		t.Fatalf("warning %q", w)
	}
	d, _ := New(Config{Disabled: true, Warn: time.Second})
	d.Due(t0)
	if d.Due(t0.Add(time.Hour)) {
		t.Fatal("disabled inspector is due")
	}
}

func TestStaleCached(t *testing.T) {
	s, _ := New(Config{Warn: 10 * time.Second})
	s.ObserveCached("x", t0)
	s.ObserveCached("y", t0.Add(5*time.Second))
	s.ObserveCached("x", t0.Add(9*time.Second)) // keeps the first time
	s.RemoveCached("y")
	if got := s.StaleCached(t0.Add(10 * time.Second)); got != nil {
		t.Fatalf("stale too early: %v", got)
	}
	if got := s.StaleCached(t0.Add(11 * time.Second)); !reflect.DeepEqual(got, []string{"x"}) {
		t.Fatalf("stale %v", got)
	}
	if got := s.StaleCached(t0.Add(30 * time.Second)); got != nil {
		t.Fatalf("stale twice: %v", got)
	}
}

// horovodText is the start of every report (Horovod's words) at a warning
// time of 60 s, before the per-rank lines.
const horovodText = "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. " +
	"This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. \nMissing ranks:"

const (
	differ = ": do the names differ across ranks (an unnamed op issued in a different order, or a name built from a rank-dependent value)?"
	silent = " (no request negotiated, no cached collective completed): is it still loading data, or in a code path that makes no collective (an early exit, a different branch)?"
	skips  = ": does it skip this collective on a condition that differs across ranks (a rank-dependent branch, a different number of steps)?"
)

func TestDiagnosis(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	many := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, prefix+string(rune('a'+i)))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		size    int
		submit  map[string][]int // name to the ranks that submitted it, all first seen at t0
		last    []time.Time      // nil: unknown
		missing string           // Horovod's per-rank lines
		want    []string
	}{
		{
			name:    "two ranks, names differ",
			size:    2,
			submit:  map[string][]int{"allreduce.fc1.w": {0}, "allreduce.fc2.w": {1}},
			last:    []time.Time{at(0), at(0)},
			missing: "\n0: [allreduce.fc2.w]\n1: [allreduce.fc1.w]",
			want: []string{
				"rank 0 submitted allreduce.fc1.w but never allreduce.fc2.w" + differ,
				"rank 1 submitted allreduce.fc2.w but never allreduce.fc1.w" + differ,
			},
		},
		{
			name:    "three ranks, one silent since before the stall",
			size:    3,
			submit:  map[string][]int{"allreduce.fc1.w": {0, 1}},
			last:    []time.Time{at(50), at(50), at(-30)},
			missing: "\n2: [allreduce.fc1.w]",
			want:    []string{"rank 2 submitted nothing for 91 s" + silent},
		},
		{
			name:    "three ranks, one that never submitted anything",
			size:    3,
			submit:  map[string][]int{"allreduce.fc1.w": {0, 1}},
			last:    []time.Time{at(50), at(50), {}},
			missing: "\n2: [allreduce.fc1.w]",
			want:    []string{"rank 2 submitted nothing for 61 s" + silent},
		},
		{
			name:    "both at once",
			size:    3,
			submit:  map[string][]int{"a": {0}, "b": {1}},
			last:    []time.Time{at(0), at(0), {}},
			missing: "\n0: [b]\n1: [a]\n2: [a, b]",
			want: []string{
				"rank 0 submitted a but never b" + differ,
				"rank 1 submitted b but never a" + differ,
				"rank 2 submitted nothing for 61 s" + silent,
			},
		},
		{
			name: "many names truncated",
			size: 2,
			submit: func() map[string][]int {
				m := map[string][]int{}
				for _, n := range many("x.", 8) {
					m[n] = []int{0}
				}
				for _, n := range many("y.", 7) {
					m[n] = []int{1}
				}
				return m
			}(),
			last:    []time.Time{at(0), at(0)},
			missing: "\n0: [y.a, y.b, y.c, y.d, y.e, y.f ...]\n1: [x.a, x.b, x.c, x.d, x.e, x.f ...]",
			want: []string{
				"rank 0 submitted x.a, x.b, x.c, x.d, x.e, x.f and 2 more but never y.a, y.b, y.c, y.d, y.e, y.f and 1 more" + differ,
				"rank 1 submitted y.a, y.b, y.c, y.d, y.e, y.f and 1 more but never x.a, x.b, x.c, x.d, x.e, x.f and 2 more" + differ,
			},
		},
		{
			name: "a name every submitter also has is not submitted instead",
			size: 3,
			// Rank 2 submitted c, which ranks 0 and 1 (the submitters of
			// a) have too: c is no sign that names differ and is not
			// listed; d is.
			submit:  map[string][]int{"a": {0, 1}, "c": {0, 1, 2}, "d": {2}},
			last:    []time.Time{at(0), at(0), at(55)},
			missing: "\n0: [d]\n1: [d]\n2: [a]",
			want: []string{
				"rank 0 submitted a but never d" + differ,
				"rank 1 submitted a but never d" + differ,
				"rank 2 submitted d but never a" + differ,
			},
		},
		{
			name:    "active but skipping",
			size:    3,
			submit:  map[string][]int{"a": {0, 1}, "c": {0, 1, 2}},
			last:    []time.Time{at(0), at(0), at(59.5)},
			missing: "\n2: [a]",
			want:    []string{"rank 2 kept submitting other requests (the last 1.5 s ago) but never a" + skips},
		},
		{
			name:    "activity unknown",
			size:    3,
			submit:  map[string][]int{"a": {0, 1}},
			missing: "\n2: [a]",
			want:    []string{"rank 2 never submitted a" + skips},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New(Config{Warn: 60 * time.Second})
			for n := range tc.submit {
				s.Observe(n, t0)
			}
			rep, ok := s.Check(at(61), tc.size, tc.submit, tc.last)
			if !ok {
				t.Fatal("no report")
			}
			if !reflect.DeepEqual(rep.Diagnosis, tc.want) {
				t.Fatalf("diagnosis\n%q\nwant\n%q", rep.Diagnosis, tc.want)
			}
			// Horovod's text comes first, unchanged, then the lines.
			if want := horovodText + tc.missing + "\n" + strings.Join(tc.want, "\n"); rep.Message != want {
				t.Fatalf("message\n%s\nwant\n%s", rep.Message, want)
			}
		})
	}
}

func TestDiagnosisAfterShutdownLine(t *testing.T) {
	s, _ := New(Config{Warn: 20 * time.Millisecond, Shutdown: 40 * time.Millisecond})
	s.Observe("a", t0)
	rep, ok := s.Check(t0.Add(50*time.Millisecond), 2, map[string][]int{"a": {0}}, []time.Time{t0, {}})
	if !ok || !rep.Shutdown {
		t.Fatalf("report %+v", rep)
	}
	want := `Will shutdown.` + "\nrank 1 submitted nothing for 0.05 s" + silent
	if !strings.HasSuffix(rep.Message, want) {
		t.Fatalf("message %q", rep.Message)
	}
}
