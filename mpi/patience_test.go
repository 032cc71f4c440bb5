package mpi

import (
	"testing"
	"time"
)

func TestPatienceSchedule(t *testing.T) {
	us := time.Microsecond
	w := waiter{p: Patience{Spin: 20 * us, First: 10 * us, Max: 50 * us}}
	// Within the spin: test again at once.
	for _, waited := range []time.Duration{0, 5 * us, 19 * us} {
		if d := w.next(waited); d != 0 {
			t.Fatalf("after %v: sleep %v, want none within the spin", waited, d)
		}
	}
	var got []time.Duration
	for range 5 {
		got = append(got, w.next(time.Millisecond))
	}
	want := []time.Duration{10 * us, 20 * us, 40 * us, 50 * us, 50 * us}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sleeps %v, want %v (doubling from First up to Max)", got, want)
		}
	}
	// Max 0 never sleeps: the collective is tested without pause.
	w = waiter{p: Patience{Spin: 0, First: 10 * us}}
	if d := w.next(time.Second); d != 0 {
		t.Fatalf("Max 0: sleep %v", d)
	}
	// A zero First still sleeps (a microsecond), and doubles from there.
	w = waiter{p: Patience{Max: 4 * us}}
	if a, b, c, d := w.next(0), w.next(0), w.next(0), w.next(0); a != us || b != 2*us || c != 4*us || d != 4*us {
		t.Fatalf("zero First: %v %v %v %v", a, b, c, d)
	}
}
