package optim

import (
	"math"
	"testing"
)

func TestSchedules(t *testing.T) {
	const base = 0.0125
	cases := []struct {
		name  string
		s     Schedule
		epoch float64
		want  float64
	}{
		{"constant", Constant(0.1), 0, 0.1},
		{"constant/late", Constant(0.1), 1e6, 0.1},
		{"step/before", StepDecay(1, 0.1, 30, 60, 80), 29.999, 1},
		{"step/at first", StepDecay(1, 0.1, 30, 60, 80), 30, 0.1},
		{"step/at second", StepDecay(1, 0.1, 60, 30, 80), 60, 0.01},
		{"step/after last", StepDecay(1, 0.1, 30, 60, 80), 95, 0.001},
		{"cosine/before", Cosine(1, 0.1, 2, 12), 1, 1},
		{"cosine/start", Cosine(1, 0.1, 2, 12), 2, 1},
		{"cosine/middle", Cosine(1, 0.1, 2, 12), 7, 0.55},
		{"cosine/quarter", Cosine(1, 0, 0, 8), 2, (1 + math.Sqrt2/2) / 2},
		{"cosine/end", Cosine(1, 0.1, 2, 12), 12, 0.1},
		{"cosine/after", Cosine(1, 0.1, 2, 12), 50, 0.1},
		{"scale", Scale(Constant(base), 4), 3, 4 * base},
		// Goyal warmup at size 4 over 5 epochs rises from base to 4·base.
		{"warmup/start", Warmup(Scale(Constant(base), 4), 4, 5), 0, base},
		{"warmup/middle", Warmup(Scale(Constant(base), 4), 4, 5), 2.5, base * 2.5},
		{"warmup/end", Warmup(Scale(Constant(base), 4), 4, 5), 5, 4 * base},
		{"warmup/after", Warmup(Scale(Constant(base), 4), 4, 5), 7, 4 * base},
		{"warmup/size 1", Warmup(Constant(base), 1, 5), 0, base},
		// Horovod's ImageNet recipe: warmup, then ×0.1 at 30, 60, 80.
		{"warmup+step/epoch 1", Warmup(Scale(StepDecay(base, 0.1, 30, 60, 80), 8), 8, 5), 1, base * 8 * (1*7.0/5 + 1) / 8},
		{"warmup+step/epoch 29", Warmup(Scale(StepDecay(base, 0.1, 30, 60, 80), 8), 8, 5), 29, 8 * base},
		{"warmup+step/epoch 30", Warmup(Scale(StepDecay(base, 0.1, 30, 60, 80), 8), 8, 5), 30, 0.8 * base},
		{"warmup+cosine/epoch 3", Warmup(Scale(Cosine(base, 0, 5, 15), 2), 2, 5), 3, base * 2 * (3.0/5 + 1) / 2},
		{"warmup+cosine/epoch 10", Warmup(Scale(Cosine(base, 0, 5, 15), 2), 2, 5), 10, base},
		{"func", ScheduleFunc(func(e float64) float64 { return e * 2 }), 3, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.LR(c.epoch); math.Abs(got-c.want) > 1e-12 {
				t.Fatalf("LR(%g) = %.15g, want %.15g", c.epoch, got, c.want)
			}
		})
	}
}

// TestWarmupIsLinear checks that warmup rises linearly, as Goyal et al.
// prescribe: equal steps in epoch give equal steps in rate.
func TestWarmupIsLinear(t *testing.T) {
	s := Warmup(Scale(Constant(0.1), 4), 4, 5)
	d := s.LR(1) - s.LR(0)
	for e := 1.0; e < 5; e++ {
		if got := s.LR(e+1) - s.LR(e); math.Abs(got-d) > 1e-12 {
			t.Fatalf("rise from epoch %g is %g, from epoch 0 %g", e, got, d)
		}
	}
	if d <= 0 {
		t.Fatal("warmup does not rise")
	}
}

func TestSchedulePanics(t *testing.T) {
	for name, f := range map[string]func(){
		"cosine":  func() { Cosine(1, 0, 5, 5) },
		"warmup0": func() { Warmup(Constant(1), 4, 0) },
		"size0":   func() { Warmup(Constant(1), 0, 5) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}
