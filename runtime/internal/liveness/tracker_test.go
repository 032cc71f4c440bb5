package liveness

import (
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tr := NewTracker(4)
	for r := 1; r < 4; r++ {
		tr.Track(r, t0)
	}
	if s := tr.Silent(t0.Add(5*time.Second), 10*time.Second); len(s) != 0 {
		t.Fatalf("silent after 5 s of a 10 s timeout: %v", s)
	}
	tr.Heard(1, t0.Add(8*time.Second))
	tr.Heard(2, t0.Add(9*time.Second))
	tr.Heard(2, t0.Add(3*time.Second)) // late report of an older beat
	got := tr.Silent(t0.Add(12*time.Second), 10*time.Second)
	if len(got) != 1 || got[0].Rank != 3 || got[0].For != 12*time.Second {
		t.Fatalf("Silent at 12 s = %v, want rank 3 (not heard since tracked) for 12 s", got)
	}
	got = tr.Silent(t0.Add(20*time.Second), 10*time.Second)
	if len(got) != 3 || got[0].Rank != 1 || got[1].Rank != 2 || got[2].Rank != 3 || got[0].For != 12*time.Second || got[1].For != 11*time.Second {
		t.Fatalf("Silent at 20 s = %v, want ranks 1 (12 s), 2 (11 s: its late older beat does not count) and 3", got)
	}
	tr.Gone(1)
	tr.Gone(3)
	if s := tr.Silent(t0.Add(20*time.Second), 10*time.Second); len(s) != 1 || s[0].Rank != 2 {
		t.Fatalf("after ranks 1 and 3 left, Silent = %v, want rank 2 only", s)
	}
	if s := tr.Silent(t0.Add(20*time.Second), 30*time.Second); len(s) != 0 {
		t.Fatalf("rank 2 heard at 9 s is silent at 20 s with a 30 s timeout: %v", s)
	}
}
