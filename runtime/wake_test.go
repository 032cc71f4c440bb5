package runtime

import (
	"context"
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
