package cycle

import (
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/autotune"
)

// TestTuningSync: rank 0's setting reaches every rank, which learns what
// changed, whether the cache switched, and when tuning has finished.
func TestTuningSync(t *testing.T) {
	init := autotune.Params{FusionBytes: 64 << 20, CycleTime: time.Millisecond, CacheEnabled: true,
		ChunkBytes: 4 << 20, FusionChunkBytes: 256 << 10}
	syncs := []*TuningSync{NewTuningSync(0, init), NewTuningSync(1, init), NewTuningSync(2, init)}
	round := func(p autotune.Params, done bool) []TuningChange {
		t.Helper()
		steps := make([]*Step, len(syncs))
		for r, s := range syncs {
			if !s.Active() {
				t.Fatalf("rank %d no longer tunes", r)
			}
			// Only rank 0's setting counts.
			q := p
			if r != 0 {
				q = autotune.Params{FusionBytes: -7}
			}
			steps[r] = s.Begin(q, done && r == 0)
		}
		if err := perform(steps); err != nil {
			t.Fatal(err)
		}
		out := make([]TuningChange, len(syncs))
		for r, s := range syncs {
			c, err := s.Received()
			if err != nil {
				t.Fatal(err)
			}
			if c.Params != p || s.Applied() != p {
				t.Fatalf("rank %d received %+v, want %+v", r, c.Params, p)
			}
			out[r] = c
		}
		for _, c := range out[1:] {
			if c != out[0] {
				t.Fatalf("ranks differ: %+v and %+v", out[0], c)
			}
		}
		return out
	}
	if c := round(init, false)[0]; c.Changed || c.SwitchCache || c.Finished {
		t.Errorf("the initial setting: %+v", c)
	}
	p := init
	p.FusionBytes = 1 << 20
	if c := round(p, false)[0]; !c.Changed || c.SwitchCache || c.Finished {
		t.Errorf("a new fusion threshold: %+v", c)
	}
	p.CacheEnabled = false
	if c := round(p, true)[0]; !c.Changed || !c.SwitchCache || !c.Finished {
		t.Errorf("the cache off, finished: %+v", c)
	}
	for r, s := range syncs {
		if s.Active() {
			t.Errorf("rank %d still tunes", r)
		}
	}
}
