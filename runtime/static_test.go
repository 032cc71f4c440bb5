package runtime

import (
	"fmt"
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
