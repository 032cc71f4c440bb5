package preempt

import (
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

// Four ranks train in one goroutine; rank 2 is signalled during step 5.
// At the boundary of step 5 they agree (an OR of what each was told), and
// every rank stops after step 5, not one step later on some.
func TestWorkersStopAtTheSameStep(t *testing.T) {
	ranks := make([]Worker, 4)
	stoppedAt := []int{-1, -1, -1, -1}
	for step := 0; step < 10; step++ {
		if step == 5 {
			if d := ranks[2].Signal(t0); d != Continue {
				t.Fatalf("the first signal: %v, want continue", d)
			}
		}
		any := false
		for r := range ranks {
			any = any || ranks[r].Requested()
		}
		for r := range ranks {
			if ranks[r].Boundary(any) == Stop && stoppedAt[r] < 0 {
				stoppedAt[r] = step
			}
		}
		if any {
			break
		}
	}
	for r, s := range stoppedAt {
		if s != 5 {
			t.Errorf("rank %d stopped after step %d, want 5", r, s)
		}
		if !ranks[r].Stopping() {
			t.Errorf("rank %d does not know it is stopping", r)
		}
	}
	if ranks[0].Requested() {
		t.Error("rank 0 reports a signal it never had")
	}
}

func TestWorkerSecondSignalAndGrace(t *testing.T) {
	var w Worker
	if _, ok := w.Deadline(); ok {
		t.Error("a deadline before any signal")
	}
	if w.Tick(t0.Add(time.Hour)) != Continue {
		t.Error("Tick without a signal ends the process")
	}
	w.Signal(t0)
	if d, _ := w.Deadline(); !d.Equal(t0.Add(DefaultGrace)) {
		t.Errorf("deadline %v, want the default grace after the signal", d)
	}
	if w.Tick(t0.Add(DefaultGrace-time.Millisecond)) != Continue {
		t.Error("Tick before the deadline ends the process")
	}
	if w.Tick(t0.Add(DefaultGrace)) != Exit {
		t.Error("Tick at the deadline does not end the process")
	}
	if w.Signal(t0.Add(Echo/2)) != Continue {
		t.Error("the same request delivered twice (by SLURM and by the launcher) ends the process")
	}
	if w.Signal(t0.Add(Echo)) != Exit {
		t.Error("a second signal does not end the process")
	}
	g := Worker{Grace: 2 * time.Second}
	g.Signal(t0)
	if g.Tick(t0.Add(2*time.Second)) != Exit {
		t.Error("a grace of 2 s is not kept")
	}
}

func TestLaunch(t *testing.T) {
	cases := []struct {
		name      string
		signals   int
		exits     []int
		preempted bool
	}{
		{"every worker preempted", 1, []int{ExitStatus, ExitStatus, ExitStatus}, true},
		{"preempted on their own (SLURM signalled the workers)", 0, []int{ExitStatus, ExitStatus}, true},
		{"some ended well before the others were preempted", 1, []int{0, ExitStatus}, true},
		{"a worker failed", 1, []int{ExitStatus, 1}, false},
		{"workers killed by the forwarded signal (no preemption support)", 1, []int{138, 138}, false},
		{"every worker ended well", 0, []int{0, 0}, false},
	}
	for _, c := range cases {
		var l Launch
		for i := 0; i < c.signals; i++ {
			if a := l.Signal(t0); a != Forward {
				t.Errorf("%s: the first signal: %v", c.name, a)
			}
		}
		for _, s := range c.exits {
			l.Exited(s, t0.Add(time.Second))
		}
		if l.Preempted() != c.preempted {
			t.Errorf("%s: Preempted() = %v", c.name, l.Preempted())
		}
		failed := 0
		for _, s := range c.exits {
			if s != 0 && s != ExitStatus {
				failed++
			}
		}
		if l.Failed() != failed {
			t.Errorf("%s: Failed() = %d, want %d", c.name, l.Failed(), failed)
		}
		if want := c.signals > 0 || c.preempted; l.Preempting() != want {
			t.Errorf("%s: Preempting() = %v", c.name, l.Preempting())
		}
	}
}

func TestLaunchDeadline(t *testing.T) {
	l := Launch{Grace: 10 * time.Second}
	if l.Tick(t0.Add(time.Hour)) != Wait {
		t.Error("Tick of a job not being preempted stops it")
	}
	// A worker's own preemption starts the clock.
	l.Exited(ExitStatus, t0)
	if d, _ := l.Deadline(); !d.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("deadline %v", d)
	}
	// A later signal does not move it.
	if l.Signal(t0.Add(5*time.Second)) != Forward {
		t.Error("the first signal is not forwarded")
	}
	if l.Tick(t0.Add(9*time.Second)) != Wait || l.Tick(t0.Add(10*time.Second)) != StopNow {
		t.Error("the grace period is not kept")
	}
	if l.Signal(t0.Add(5*time.Second+Echo/2)) != Wait {
		t.Error("the same signal delivered twice stops the job")
	}
	if l.Signal(t0.Add(6*time.Second)) != StopNow {
		t.Error("a second signal does not stop the job")
	}
	var d Launch
	d.Signal(t0)
	if dl, _ := d.Deadline(); !dl.Equal(t0.Add(DefaultGrace + 5*time.Second)) {
		t.Errorf("default deadline %v", dl)
	}
}

func TestStrings(t *testing.T) {
	for _, s := range []string{Continue.String(), Stop.String(), Exit.String(), Decision(9).String(),
		Wait.String(), Forward.String(), StopNow.String(), Action(9).String()} {
		if s == "" {
			t.Error("an empty name")
		}
	}
}
