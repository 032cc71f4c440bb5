package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// The static schedule's scenarios, shared by the in-memory tests
// (static_test.go) and the multi-process ones over MPI and the embedded
// transport (static_mpi_test.go): every rank runs staticScenario.

// divergence is what the last rank does differently in the step after the
// schedule locked.
type divergence int

const (
	divNone     divergence = iota
	divRename              // submits the second tensor under another name
	divSkip                // never submits the second tensor
	divReorder             // submits the tensors in another order
	divReshape             // submits the second tensor with another shape
	divSlow                // submits its step after the others' patience
	divJoin                // joins instead of stepping
	divShutdown            // shuts its runtime down instead of stepping
)

func (d divergence) String() string {
	return [...]string{"none", "rename", "skip", "reorder", "reshape", "slow", "join", "shutdown"}[d]
}

// staticConfig is the configuration of the scenarios: the schedule locks
// after 2 rounds, and a stall stops the job a moment after it is seen.
func staticConfig() config.Config {
	cfg := testConfig()
	cfg.StaticSchedule = 2
	cfg.StallCheckTime = 300 * time.Millisecond
	cfg.StallShutdownTime = 600 * time.Millisecond
	return cfg
}

const staticTensors = 3

// staticStep runs one step: the tensors s.0, s.1, s.2 (4, 1000 and 3
// elements of rank+1), submitted all at once and then waited on (async) or
// one call at a time (sync), changed on the last rank by div. It checks
// the sums of what completes and returns the first error.
func staticStep(ctx context.Context, r *Runtime, step int, async bool, div divergence) error {
	rank, size := r.Rank(), r.Size()
	last := rank == size-1
	order := []int{0, 1, 2}
	if last && div == divReorder {
		order = []int{2, 1, 0}
	}
	if last && div == divSlow {
		time.Sleep(staticTiming.Patience + 300*time.Millisecond)
	}
	lens := []int{4, 1000, 3}
	want := float32(size * (size + 1) / 2)
	if div == divShutdown && last {
		return r.Shutdown()
	}
	if div == divJoin {
		if last {
			_, err := r.Join(ctx)
			return err
		}
		want -= float32(size) // the joined rank adds zeros
	}
	run := func(i int) (*tensor.Tensor, *Handle, error) {
		name, n := fmt.Sprintf("s.%d", i), lens[i]
		if last && i == 1 {
			switch div {
			case divSkip:
				return nil, nil, nil
			case divRename:
				name = "s.1.renamed"
			case divReshape:
				n++
			}
		}
		t := fill(tensor.Float32, n, float64(rank+1))
		h, err := r.AllreduceAsync(t, name, Sum)
		return t, h, err
	}
	check := func(i int, h *Handle) error {
		if err := h.Wait(ctx); err != nil {
			return fmt.Errorf("step %d, s.%d: %w", step, i, err)
		}
		for k, v := range h.Output().Float32s() {
			if v != want {
				return fmt.Errorf("step %d, s.%d[%d] = %v, want %v", step, i, k, v, want)
			}
		}
		return nil
	}
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if async {
		hs := make([]*Handle, staticTensors)
		for _, i := range order {
			_, h, err := run(i)
			if err != nil {
				return err
			}
			hs[i] = h
		}
		for i, h := range hs {
			if h != nil {
				keep(check(i, h))
			}
		}
		return first
	}
	for _, i := range order {
		_, h, err := run(i)
		if err != nil {
			return err
		}
		if h != nil {
			if err := check(i, h); err != nil {
				return err
			}
		}
	}
	return nil
}

// staticScenario runs warm-up steps until the schedule has locked on every
// rank, then the divergent step, and checks what every rank must see: the
// right sums where nothing diverged (or where Horovod allows it: another
// order of async calls, a rank slower than the patience); Horovod's
// shape-mismatch error for a changed shape, after which the job goes on;
// and the stall inspector's shutdown for a renamed, skipped or (for
// synchronous calls) reordered tensor, never a hang or a wrong sum.
func staticScenario(ctx context.Context, r *Runtime, async bool, div divergence) error {
	const warm = 6
	for step := range warm {
		if err := staticStep(ctx, r, step, async, divNone); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	before := r.Stats()
	if before.StaticLocks == 0 || before.StaticUnits == 0 {
		return fmt.Errorf("no static schedule after %d steps: %+v", warm, before)
	}
	err := staticStep(ctx, r, warm, async, div)
	switch div {
	case divNone, divSlow:
		if err != nil {
			return err
		}
		if err := staticStep(ctx, r, warm+1, async, divNone); err != nil {
			return err
		}
		after := r.Stats()
		if div == divNone && (after.StaticDissolved != before.StaticDissolved || after.StaticUnits <= before.StaticUnits) {
			return fmt.Errorf("the schedule did not carry the steps: before %+v, after %+v", before, after)
		}
		if div == divSlow && after.StaticDissolved == before.StaticDissolved {
			return fmt.Errorf("a rank past the patience did not dissolve the schedule: %+v", after)
		}
		return nil
	case divShutdown:
		if r.Rank() == r.Size()-1 {
			return err
		}
		if !errors.Is(err, ErrShutdown) {
			return fmt.Errorf("another rank shut down: %v, want ErrShutdown", err)
		}
		return nil
	case divJoin:
		if err != nil {
			return err
		}
		if r.Rank() != r.Size()-1 {
			if _, err := r.Join(ctx); err != nil {
				return err
			}
		}
		return staticStep(ctx, r, warm+1, async, divNone)
	case divReorder:
		if async {
			if err != nil {
				return err
			}
			return staticStep(ctx, r, warm+1, async, divNone)
		}
	case divReshape:
		var oe *OpError
		const text = "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape "
		if !errors.As(err, &oe) || !strings.Contains(oe.Message, text) {
			return fmt.Errorf("a changed shape gave %v, want %q", err, text)
		}
		// The job goes on, and learns the schedule again.
		for step := warm + 1; step < 2*warm; step++ {
			if err := staticStep(ctx, r, step, async, divNone); err != nil {
				return fmt.Errorf("after the mismatch: %w", err)
			}
		}
		if after := r.Stats(); after.StaticLocks <= before.StaticLocks {
			return fmt.Errorf("the schedule did not lock again after the mismatch: %+v", after)
		}
		return nil
	}
	// Renamed, skipped, or reordered synchronous calls: Horovod stalls,
	// and with a shutdown time its stall inspector stops the job. A rank
	// whose own calls all completed learns it from its next call.
	if err == nil {
		_, err = r.Allreduce(ctx, fill(tensor.Float32, 1, 1), "after", Sum)
	}
	if !errors.Is(err, ErrShutdown) {
		return fmt.Errorf("%v divergence: %v, want the stall inspector's shutdown", div, err)
	}
	if r.Rank() == 0 && !strings.Contains(err.Error(), "hvd: stall inspector: ") {
		return fmt.Errorf("rank 0's error does not name the stall inspector: %v", err)
	}
	return nil
}
