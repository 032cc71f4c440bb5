package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// With a cycle time far longer than the test, a lone asynchronous allreduce
// completes only because waiting on its handle wakes the loop, and Shutdown
// returns only because it wakes the loop too.
func TestWaitAndShutdownWakeTheLoop(t *testing.T) {
	cfg := testConfig()
	cfg.CycleTime = time.Hour
	c := startCluster(t, 2, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.each(t, func(r *Runtime, rank int) error {
		if err := r.Barrier(ctx); err != nil {
			return err
		}
		for step := 0; step < 3; step++ {
			x := tensor.FromFloat32([]float32{float32(rank + 1)})
			h, err := r.AllreduceAsyncInPlace(x, "lone", Sum)
			if err != nil {
				return err
			}
			if err := h.Wait(ctx); err != nil {
				return err
			}
			if got := x.Float32s()[0]; got != 3 {
				t.Errorf("rank %d step %d: sum %v, want 3", rank, step, got)
			}
		}
		return nil
	})
	shutdownAll(t, c)
}

// A rank that waits while one of its names is still in flight cycles again
// at once rather than sleeping until the tick: here rank 0's first cycle
// can perform only "a" (rank 1 submits "b" after "a" completes), and with
// an hour-long cycle time "b" completes only because rank 0's loop, whose
// caller still waits, meets rank 1's next cycle. Three steps: the first
// negotiates, the later ones run from the response cache.
func TestWaiterKeepsTheLoopCycling(t *testing.T) {
	cfg := testConfig()
	cfg.CycleTime = time.Hour
	c := startCluster(t, 2, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.each(t, func(r *Runtime, rank int) error {
		for step := range 3 {
			a := tensor.FromFloat32([]float32{float32(rank + 1)})
			b := tensor.FromFloat32([]float32{float32(10 * (rank + 1))})
			ha, err := r.AllreduceAsyncInPlace(a, "a", Sum)
			if err != nil {
				return err
			}
			var hb *Handle
			if rank == 0 {
				if hb, err = r.AllreduceAsyncInPlace(b, "b", Sum); err != nil {
					return err
				}
				if err := hb.Wait(ctx); err != nil {
					return fmt.Errorf("step %d: waiting for b: %w", step, err)
				}
			}
			if err := ha.Wait(ctx); err != nil {
				return fmt.Errorf("step %d: waiting for a: %w", step, err)
			}
			if rank == 1 {
				if hb, err = r.AllreduceAsyncInPlace(b, "b", Sum); err != nil {
					return err
				}
				if err := hb.Wait(ctx); err != nil {
					return fmt.Errorf("step %d: waiting for b: %w", step, err)
				}
			}
			if a.Float32s()[0] != 3 || b.Float32s()[0] != 30 {
				return fmt.Errorf("step %d: sums %v and %v, want 3 and 30", step, a.Float32s()[0], b.Float32s()[0])
			}
		}
		return nil
	})
	shutdownAll(t, c)
}

// shutdownAll shuts every rank of c down at once and fails the test if that
// takes more than 10 s: with an hour-long cycle time, only the wake-up that
// Shutdown gives the loop ends the ranks' last cycles.
func shutdownAll(t *testing.T, c *cluster) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, r := range c.rts {
			wg.Add(1)
			go func(r *Runtime) { defer wg.Done(); r.Shutdown() }(r)
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown waited for the next cycle tick")
	}
}
