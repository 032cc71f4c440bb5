package schedule

import (
	"testing"
	"time"
)

// TestClocks follows one rank on a locked schedule: idle until the
// heartbeat, a caller waiting on an incomplete unit until Stuck, a ready
// unit waiting for its peers until Patience.
func TestClocks(t *testing.T) {
	tm := Timing{Heartbeat: 50 * time.Millisecond, Patience: time.Second, Stuck: 20 * time.Millisecond}
	t0 := time.Unix(10, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var c Clocks
	c.Locked(t0)

	loc := c.Observe(at(10), false, false, false)
	if v, join := Choose(loc, tm); join {
		t.Fatalf("idle rank joins at 10 ms with %v", v)
	}
	if w := c.Wake(tm); !w.Equal(at(50)) {
		t.Fatalf("idle wake %v, want the heartbeat", w.Sub(t0))
	}
	if v, join := Choose(c.Observe(at(50), false, false, false), tm); !join || v != Wait {
		t.Fatalf("heartbeat: %v %v", v, join)
	}
	c.Joined(at(50))

	// A caller waits from 60 ms on an incomplete unit: wake at 80 ms,
	// leave after 20 ms.
	c.Observe(at(60), false, false, true)
	if w := c.Wake(tm); !w.Equal(at(80)) {
		t.Fatalf("stuck wake %v, want 80ms", w.Sub(t0))
	}
	if v, join := Choose(c.Observe(at(81), false, false, true), tm); !join || v != Leave {
		t.Fatalf("stuck past Stuck: %v %v", v, join)
	}
	// The unit gets ready: the stuck clock stops, the ready one starts.
	loc = c.Observe(at(90), false, true, true)
	if loc.StuckFor != 0 || loc.ReadyFor != 0 {
		t.Fatalf("ready at 90ms: %+v", loc)
	}
	if v, _ := Choose(c.Observe(at(500), false, true, false), tm); v != Ready {
		t.Fatalf("ready within patience: %v", v)
	}
	if v, _ := Choose(c.Observe(at(1091), false, true, false), tm); v != Leave {
		t.Fatalf("ready past patience: %v", v)
	}
	c.Performed()
	if loc := c.Observe(at(1100), false, true, false); loc.ReadyFor != 0 {
		t.Fatalf("after Performed the ready clock restarts: %+v", loc)
	}
	c.Dissolved()
	if loc := c.Observe(at(1200), true, false, true); loc.StuckFor != 0 || !loc.Deviant {
		t.Fatalf("after Dissolved: %+v", loc)
	}
}
