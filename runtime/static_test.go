package runtime

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestStaticSchedule runs every scenario of static_scenarios_test.go on
// three in-memory ranks, with asynchronous and synchronous calls.
func TestStaticSchedule(t *testing.T) {
	for _, async := range []bool{true, false} {
		for _, div := range []divergence{divNone, divRename, divSkip, divReorder, divReshape, divSlow, divJoin, divShutdown} {
			if testing.Short() && div == divSlow {
				continue
			}
			t.Run(fmt.Sprintf("async=%v/%v", async, div), func(t *testing.T) {
				t.Parallel()
				err := RunLocal(3, func(r *Runtime, rank int) error {
					return staticScenario(ctxT(t), r, async, div)
				}, WithConfig(staticConfig()), WithLogger(zerolog.Nop()))
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestStaticScheduleSkipsAgreements: once locked, a step costs one header
// per unit instead of an agreement every cycle, and with the knob at 0 the
// schedule never locks. The count of bit-vector allreduces (agreements and
// headers) over the same idle time and steps tells them apart.
func TestStaticScheduleSkipsAgreements(t *testing.T) {
	ands := func(repeats int) (Stats, int64) {
		cfg := testConfig()
		cfg.StaticSchedule = repeats
		rts, coms := startWrapped(t, 2, cfg, func(c comm.Communicator) *andCounting { return &andCounting{Communicator: c} })
		errs := make(chan error, len(rts))
		defer StopLocal(rts)
		step := func(k int) {
			for i, r := range rts {
				go func() {
					out, err := r.Allreduce(ctxT(t), fill(tensor.Float32, 8, float64(i+1)), "w", Sum)
					if err == nil && out.Float32s()[0] != 3 {
						err = fmt.Errorf("sum %v", out.Float32s()[0])
					}
					errs <- err
				}()
			}
			for range rts {
				if err := <-errs; err != nil {
					t.Fatalf("step %d: %v", k, err)
				}
			}
		}
		for k := range 5 {
			step(k)
		}
		base := coms[0].ands.Load()
		// Idle time between steps, as a forward pass would take.
		for k := range 10 {
			time.Sleep(20 * time.Millisecond)
			step(5 + k)
		}
		return rts[0].Stats(), coms[0].ands.Load() - base
	}
	on, onANDs := ands(2)
	off, offANDs := ands(0)
	if on.StaticLocks == 0 || on.StaticUnits < 10 || on.StaticDissolved != 0 {
		t.Fatalf("knob 2: %+v", on)
	}
	if off.StaticLocks != 0 || off.StaticUnits != 0 {
		t.Fatalf("knob 0 locked: %+v", off)
	}
	// Without the schedule every 1 ms cycle of the 200 ms idle agrees;
	// with it, only the heartbeats and one header per step.
	if onANDs*4 > offANDs {
		t.Fatalf("bit-vector allreduces over 10 steps: %d with the schedule, %d without", onANDs, offANDs)
	}
	t.Logf("bit-vector allreduces over 10 steps: %d with the schedule, %d without", onANDs, offANDs)
}

// andCounting counts the bit-vector allreduces (agreements, invalidations
// and headers).
type andCounting struct {
	comm.Communicator
	ands atomic.Int64
}

func (c *andCounting) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	if op == tensor.BitAnd || op == tensor.BitOr {
		c.ands.Add(1)
	}
	return c.Communicator.Allreduce(buf, op)
}

// TestStaticRun: once the schedule is locked, a group whose tensors lie
// in one run of memory on every rank (tensor.NewFlat, as an optimizer's
// flat gradients) is reduced in one call per step where it lies, although
// one of its tensors is above the largest fused size and would be reduced
// alone otherwise; the header carries the layout, so no other collective
// agrees on it. A rank whose tensors are separate allocations keeps every
// rank on the fused path. The sums (and averages) are right either way.
func TestStaticRun(t *testing.T) {
	sizes := []int{1000, 30000, 7, 2048} // 30000 float32: above the 64 KiB MaxFused
	tests := []struct {
		name string
		flat []bool // per rank
		op   ReduceOp
		runs bool
	}{
		{"flat everywhere", []bool{true, true}, Sum, true},
		{"flat everywhere, three ranks, average", []bool{true, true, true}, Average, true},
		{"one rank separate", []bool{true, true, false}, Sum, false},
	}
	const steps, timed = 10, 4
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(tt.flat)
			cfg := testConfig()
			cfg.StaticSchedule = 2
			c := startClusterWith(t, n, WithConfig(cfg))
			names := make([]string, len(sizes))
			for i := range names {
				names[i] = fmt.Sprintf("run.%d", i)
			}
			before, runs0 := make([]int64, n), make([]int64, n)
			// An in-process barrier before the counted steps: a runtime
			// Barrier would take every rank off the schedule.
			var arrived sync.WaitGroup
			arrived.Add(n)
			counted := make(chan struct{})
			go func() {
				arrived.Wait()
				for k := range n {
					before[k], runs0[k] = c.counts[k].dataAllreduce.Load(), c.rts[k].Stats().StaticRuns
				}
				close(counted)
			}()
			c.each(t, func(r *Runtime, rank int) error {
				ts := float32Tensors(sizes, tt.flat[rank])
				g, err := r.NewAllreduceGroup(ts, names, tt.op)
				if err != nil {
					return err
				}
				defer g.Close()
				want := func(i, j int) float32 { return float32(100*n*(n+1)/2 + n*(10*i+j%100)) }
				if tt.op == Average {
					want = func(i, j int) float32 { return float32(100*n*(n+1)/2+n*(10*i+j%100)) / float32(n) }
				}
				for step := range steps {
					if step == steps-timed {
						arrived.Done()
						<-counted
					}
					err := groupStep(ctxT(t), g, ts, step,
						func(i, j int) float32 { return float32(100*(rank+1) + 10*i + j%100) }, want)
					if err != nil {
						return err
					}
				}
				return nil
			})
			if t.Failed() {
				return
			}
			for k := range n {
				s := c.rts[k].Stats()
				calls, runs := c.counts[k].dataAllreduce.Load()-before[k], s.StaticRuns-runs0[k]
				if s.StaticLocks == 0 {
					t.Fatalf("rank %d: the schedule never locked: %+v", k, s)
				}
				if tt.runs && (runs != timed || calls != timed) {
					t.Errorf("rank %d: %d runs, %d data allreduces in the last %d steps; want one run and one call a step", k, runs, calls, timed)
				}
				if !tt.runs && (s.StaticRuns != 0 || calls < 2*timed) {
					t.Errorf("rank %d: %d runs, %d data allreduces in the last %d steps; want none and the fused path's calls", k, s.StaticRuns, calls, timed)
				}
			}
		})
	}
}

// TestStaticRunShortCapacity: tensors that follow one another but whose
// first one's capacity ends before the last one does (views cut with a
// full slice expression) are not a run: every rank keeps the fused path,
// and the sums are right.
func TestStaticRunShortCapacity(t *testing.T) {
	cfg := testConfig()
	cfg.StaticSchedule = 2
	c := startClusterWith(t, 2, WithConfig(cfg))
	c.each(t, func(r *Runtime, rank int) error {
		buf := make([]float32, 12)
		ts := []*tensor.Tensor{tensor.FromFloat32(buf[0:4:5]), tensor.FromFloat32(buf[4:8:9]), tensor.FromFloat32(buf[8:12])}
		if !tensor.Follows(ts[1], ts[0]) || !tensor.Follows(ts[2], ts[1]) {
			return fmt.Errorf("the views do not follow one another")
		}
		g, err := r.NewAllreduceGroup(ts, []string{"cap.0", "cap.1", "cap.2"}, Sum)
		if err != nil {
			return err
		}
		defer g.Close()
		for step := range 8 {
			err := groupStep(ctxT(t), g, ts, step,
				func(i, j int) float32 { return float32(10*(rank+1) + i + j) },
				func(i, j int) float32 { return float32(30 + 2*(i+j)) })
			if err != nil {
				return err
			}
		}
		if s := r.Stats(); s.StaticLocks == 0 || s.StaticRuns != 0 {
			return fmt.Errorf("locked %d times, %d runs: want a lock and no run", s.StaticLocks, s.StaticRuns)
		}
		return nil
	})
}
