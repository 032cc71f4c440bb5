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
	rep, ok := s.Check(now, 3, pending)
	if !ok || rep.Shutdown {
		t.Fatalf("report %+v ok %v", rep, ok)
	}
	if !reflect.DeepEqual(rep.Missing, map[int][]string{1: {"a"}}) {
		t.Fatalf("missing %v", rep.Missing)
	}
	want := "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds."
	if !strings.HasPrefix(rep.Message, want) || !strings.HasSuffix(rep.Message, "\nMissing ranks:\n1: [a]") {
		t.Fatalf("message %q", rep.Message)
	}
	// Later: both stalled, a past the shutdown time.
	rep, ok = s.Check(t0.Add(125*time.Second), 3, pending)
	if !ok || !rep.Shutdown {
		t.Fatalf("no shutdown: %+v", rep)
	}
	if !strings.Contains(rep.Message, "\n1!: [a, b]") || !strings.Contains(rep.Message, "\n2: [b]") ||
		!strings.HasSuffix(rep.Message, `One or more rank (marked by "!") is stalled for longer than 120 seconds. Will shutdown.`) {
		t.Fatalf("message %q", rep.Message)
	}
	s.Remove("a")
	s.Remove("b")
	if _, ok := s.Check(t0.Add(200*time.Second), 3, map[string][]int{}); ok {
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
	rep, _ := s.Check(t0.Add(2*time.Second), 2, pending)
	if !strings.HasSuffix(rep.Message, "1: [a, b, c, d, e, f ...]") || rep.Shutdown {
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
