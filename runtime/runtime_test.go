//go:build !mpi || !cgo

package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/tensor"
)

func TestAllreduceOpsAndDTypes(t *testing.T) {
	const n = 3
	c := startCluster(t, n, testConfig())
	// Rank r contributes r+1: sum 6, average 2, min 1, max 3, product 6.
	tests := []struct {
		op   ReduceOp
		want float64
	}{{Sum, 6}, {Average, 2}, {Min, 1}, {Max, 3}, {Product, 6}}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64} {
		for _, tt := range tests {
			name := fmt.Sprintf("%v.%v", dt, tt.op)
			c.each(t, func(r *Runtime, rank int) error {
				in := fill(dt, 5, float64(rank+1))
				out, err := r.Allreduce(ctxT(t), in, name, tt.op)
				if err != nil {
					return err
				}
				if got := first(out); got != tt.want {
					return fmt.Errorf("%s: got %v, want %v", name, got, tt.want)
				}
				if first(in) != float64(rank+1) {
					return fmt.Errorf("%s: out-of-place allreduce modified its input", name)
				}
				return nil
			})
		}
	}
}

func TestScaleAndInPlace(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		x := fill(tensor.Float64, 4, 1)
		if err := r.AllreduceInPlace(ctxT(t), x, "scaled", Sum, Prescale(3), Postscale(0.5)); err != nil {
			return err
		}
		if x.Float64s()[3] != 3 { // (1*3 + 1*3) * 0.5
			return fmt.Errorf("got %v", x.Float64s())
		}
		// Integer average truncates, as Horovod does.
		y := fill(tensor.Int32, 1, float64(rank*3)) // 0 and 3: sum 3, average 1
		if err := r.AllreduceInPlace(ctxT(t), y, "intavg", Average); err != nil {
			return err
		}
		if y.Int32s()[0] != 1 {
			return fmt.Errorf("int average %v", y.Int32s())
		}
		return nil
	})
}

func TestFusionAndCache(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	const k = 20
	round := func() {
		c.each(t, func(r *Runtime, rank int) error {
			ts := make([]*tensor.Tensor, k)
			for i := range ts {
				ts[i] = fill(tensor.Float32, 10+i, float64(i+rank))
			}
			outs, err := r.GroupedAllreduce(ctxT(t), ts, "g", Sum)
			if err != nil {
				return err
			}
			for i, o := range outs {
				if o.Len() != 10+i || o.Float32s()[o.Len()-1] != float32(2*i+1) {
					return fmt.Errorf("tensor %d: %v", i, o.Float32s())
				}
			}
			return nil
		})
	}
	round()
	// The group is enqueued atomically, so it is negotiated in one cycle and
	// fused into one collective.
	if got := c.counts[0].dataAllreduce.Load(); got != 1 {
		t.Fatalf("first round: %d data allreduces, want 1 (fused)", got)
	}
	g := c.counts[0].gathers.Load()
	if g == 0 {
		t.Fatal("first round did not negotiate")
	}
	round()
	if got := c.counts[0].gathers.Load(); got != g {
		t.Fatalf("second round negotiated again (%d gathers, was %d): cache unused", got, g)
	}
	if got := c.counts[0].dataAllreduce.Load(); got != 2 {
		t.Fatalf("second round: %d data allreduces in all, want 2", got)
	}
}

func TestFusionThresholdZeroAndLarge(t *testing.T) {
	cfg := testConfig()
	cfg.FusionThreshold = 0
	c := startCluster(t, 2, cfg)
	c.each(t, func(r *Runtime, rank int) error {
		ts := []*tensor.Tensor{fill(tensor.Float32, 3, 1), fill(tensor.Float32, 3, 2)}
		_, err := r.GroupedAllreduce(ctxT(t), ts, "nofuse", Sum)
		return err
	})
	if got := c.counts[0].dataAllreduce.Load(); got != 2 {
		t.Fatalf("fusion disabled: %d allreduces, want 2", got)
	}
}

func TestCacheInvalidation(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	for _, n := range []int{4, 4, 7, 7, 4} {
		c.each(t, func(r *Runtime, rank int) error {
			out, err := r.Allreduce(ctxT(t), fill(tensor.Float32, n, 1), "w", Sum)
			if err != nil {
				return err
			}
			if out.Len() != n || out.Float32s()[n-1] != 2 {
				return fmt.Errorf("shape %d: %v", n, out.Float32s())
			}
			return nil
		})
	}
}

func TestMismatchErrors(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	tests := []struct {
		name string
		mk   func(r *Runtime, rank int) (*Handle, error)
		want string
	}{
		{"shape", func(r *Runtime, rank int) (*Handle, error) {
			return r.AllreduceAsync(fill(tensor.Float32, 3+rank, 1), "m.shape", Sum)
		}, "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [3], but another rank sent a tensor of shape [4]."},
		{"dtype", func(r *Runtime, rank int) (*Handle, error) {
			dt := tensor.Float32
			if rank == 1 {
				dt = tensor.Float64
			}
			return r.AllreduceAsync(fill(dt, 3, 1), "m.dtype", Sum)
		}, "Mismatched data types: One rank had type float32, but another rank had type float64."},
		{"op", func(r *Runtime, rank int) (*Handle, error) {
			return r.AllreduceAsync(fill(tensor.Float32, 3, 1), "m.op", []ReduceOp{Sum, Max}[rank])
		}, "Mismatched reduction operation: One rank sent reduction op 1, but another rank sent reduction op 4."},
		{"root", func(r *Runtime, rank int) (*Handle, error) {
			return r.BroadcastAsync(fill(tensor.Float32, 3, 1), rank, "m.root")
		}, "Mismatched BROADCAST root ranks: One rank specified root rank 0, but another rank specified root rank 1."},
	}
	for _, tt := range tests {
		c.each(t, func(r *Runtime, rank int) error {
			h, err := tt.mk(r, rank)
			if err != nil {
				return err
			}
			err = h.Wait(ctxT(t))
			var oe *OpError
			if !errors.As(err, &oe) || oe.Message != tt.want {
				return fmt.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
			}
			return nil
		})
	}
	// The runtime keeps working.
	c.each(t, func(r *Runtime, rank int) error {
		_, err := r.Allreduce(ctxT(t), fill(tensor.Float32, 3, 1), "after", Sum)
		return err
	})
}

func TestDuplicateNameAndLifecycle(t *testing.T) {
	var r Runtime
	if _, err := r.AllreduceAsync(fill(tensor.Float32, 1, 1), "x", Sum); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("before init: %v", err)
	}
	if r.Rank() != -1 || r.Size() != -1 || r.LocalRank() != -1 || r.CrossSize() != -1 {
		t.Fatalf("placement before init: rank %d size %d", r.Rank(), r.Size())
	}
	c := startCluster(t, 2, testConfig())
	r0 := c.rts[0]
	h, err := r0.AllreduceAsync(fill(tensor.Float32, 1, 1), "dup", Sum)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r0.AllreduceAsync(fill(tensor.Float32, 1, 1), "dup", Sum); !errors.Is(err, ErrDuplicateName) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := c.rts[1].AllreduceInPlace(ctxT(t), fill(tensor.Float32, 1, 1), "dup", Sum); err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The name is free again once done.
	c.each(t, func(r *Runtime, rank int) error {
		return r.AllreduceInPlace(ctxT(t), fill(tensor.Float32, 1, 1), "dup", Sum)
	})
	if err := r0.Init(); !errors.Is(err, ErrAlreadyInitialized) {
		t.Fatalf("second init: %v", err)
	}
}

func TestShutdownOnOneRankStopsAll(t *testing.T) {
	c := startCluster(t, 3, testConfig())
	// Rank 1 waits on a name the others never submit.
	h, err := c.rts[1].AllreduceAsync(fill(tensor.Float32, 1, 1), "orphan", Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.rts[0].Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(ctxT(t)); !errors.Is(err, ErrShutdown) {
		t.Fatalf("pending op: %v, want ErrShutdown", err)
	}
	for i, r := range c.rts {
		select {
		case <-r.stopped:
		case <-ctxT(t).Done():
			t.Fatalf("rank %d did not stop", i)
		}
		if r.IsInitialized() {
			t.Fatalf("rank %d still initialized", i)
		}
		if _, err := r.AllreduceAsync(fill(tensor.Float32, 1, 1), "late", Sum); !errors.Is(err, ErrShutdown) {
			t.Fatalf("rank %d after shutdown: %v", i, err)
		}
	}
}

func TestCommunicatorFailureReachesHandles(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	h, err := c.rts[0].AllreduceAsync(fill(tensor.Float32, 1, 1), "lonely", Sum)
	if err != nil {
		t.Fatal(err)
	}
	c.counts[1].Close() // tears the in-memory group down under both loops
	err = h.Wait(ctxT(t))
	if !errors.Is(err, ErrShutdown) || !errors.Is(err, comm.ErrClosed) {
		t.Fatalf("got %v, want ErrShutdown wrapping comm.ErrClosed", err)
	}
}

func TestAllgatherBroadcastAlltoall(t *testing.T) {
	c := startCluster(t, 3, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		ctx := ctxT(t)
		// Allgather: rank r sends r+1 rows of 2 columns holding r.
		in := tensor.New(tensor.Int64, rank+1, 2)
		for i := range in.Int64s() {
			in.Int64s()[i] = int64(rank)
		}
		out, err := r.Allgather(ctx, in, "ag")
		if err != nil {
			return err
		}
		if want := []int64{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}; !slices.Equal(out.Int64s(), want) || out.Shape()[0] != 6 {
			return fmt.Errorf("allgather %v %v", out.Shape(), out.Int64s())
		}
		// Broadcast from rank 2, out of place and in place.
		b := fill(tensor.Float32, 4, float64(rank))
		bo, err := r.Broadcast(ctx, b, 2, "bc")
		if err != nil {
			return err
		}
		if bo.Float32s()[0] != 2 || b.Float32s()[0] != float32(rank) {
			return fmt.Errorf("broadcast %v (input %v)", bo.Float32s(), b.Float32s())
		}
		if err := r.BroadcastInPlace(ctx, b, 1, "bc2"); err != nil || b.Float32s()[3] != 1 {
			return fmt.Errorf("broadcast in place %v %v", err, b.Float32s())
		}
		// Alltoall with splits: rank r sends j+1 rows to rank j, each row
		// holding 10*r+j.
		splits := []int{1, 2, 3}
		a := tensor.New(tensor.Int32, 7) // one row unsent
		k := 0
		for j, s := range splits {
			for range s {
				a.Int32s()[k] = int32(10*rank + j)
				k++
			}
		}
		ao, recv, err := r.Alltoall(ctx, a, splits, "a2a")
		if err != nil {
			return err
		}
		wantRecv := []int{rank + 1, rank + 1, rank + 1}
		var want []int32
		for src := 0; src < 3; src++ {
			for range rank + 1 {
				want = append(want, int32(10*src+rank))
			}
		}
		if !slices.Equal(recv, wantRecv) || !slices.Equal(ao.Int32s(), want) {
			return fmt.Errorf("alltoall recv %v %v, want %v %v", recv, ao.Int32s(), wantRecv, want)
		}
		// Alltoall without splits: equal parts.
		e := tensor.New(tensor.Int32, 3)
		for i := range e.Int32s() {
			e.Int32s()[i] = int32(rank)
		}
		eo, _, err := r.Alltoall(ctx, e, nil, "a2a.eq")
		if err != nil || !slices.Equal(eo.Int32s(), []int32{0, 1, 2}) {
			return fmt.Errorf("alltoall equal %v %v", err, eo)
		}
		if _, err := r.AlltoallAsync(tensor.New(tensor.Int32, 4), nil, "bad"); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("uneven alltoall accepted: %v", err)
		}
		return nil
	})
}

func TestReducescatter(t *testing.T) {
	c := startCluster(t, 3, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		// 7 rows of 2: ranks get 3, 2, 2 rows.
		in := tensor.New(tensor.Float64, 7, 2)
		for i := range in.Float64s() {
			in.Float64s()[i] = float64(i)
		}
		out, err := r.Reducescatter(ctxT(t), in, "rs", Sum)
		if err != nil {
			return err
		}
		rows := []int{3, 2, 2}[rank]
		off := []int{0, 3, 5}[rank]
		if out.Shape()[0] != rows {
			return fmt.Errorf("rows %v", out.Shape())
		}
		for i, v := range out.Float64s() {
			if v != 3*float64(off*2+i) {
				return fmt.Errorf("sum %v", out.Float64s())
			}
		}
		avg, err := r.Reducescatter(ctxT(t), in, "rs.avg", Average)
		if err != nil {
			return err
		}
		if avg.Float64s()[0] != float64(off*2) {
			return fmt.Errorf("average %v", avg.Float64s())
		}
		if _, err := r.ReducescatterAsync(in, "rs.max", Max); !errors.Is(err, ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "Reducescatter currently only supports AVERAGE and SUM.") {
			return fmt.Errorf("max accepted: %v", err)
		}
		return nil
	})
}

func TestBarrierAndJoin(t *testing.T) {
	c := startCluster(t, 3, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		ctx := ctxT(t)
		if err := r.Barrier(ctx); err != nil {
			return err
		}
		// Rank 2 runs out of data first, then rank 0; rank 1 keeps
		// reducing. Averages divide by the full size (zeros from joined).
		if rank == 2 {
			last, err := r.Join(ctx)
			if err != nil {
				return err
			}
			if last != 1 {
				return fmt.Errorf("last joined %d", last)
			}
			return nil
		}
		for step := 0; step < 3; step++ {
			out, err := r.Allreduce(ctx, fill(tensor.Float32, 2, 3), fmt.Sprintf("j%d", step), Average)
			if err != nil {
				return err
			}
			if rank == 1 && step == 2 {
				// Rank 0 may have joined: then 3/3, else 6/3.
				if v := out.Float32s()[0]; v != 1 && v != 2 {
					return fmt.Errorf("step %d: %v", step, v)
				}
			} else if v := out.Float32s()[0]; v != 2 && !(rank == 1 && v == 1) {
				return fmt.Errorf("rank %d step %d: %v", rank, step, v)
			}
			if rank == 0 && step == 1 {
				break
			}
		}
		if rank == 1 {
			// A broadcast while ranks are joined is an error.
			_, err := r.Broadcast(ctx, fill(tensor.Float32, 1, 1), 1, "during.join")
			var oe *OpError
			if !errors.As(err, &oe) || oe.Message != "Broadcast is not supported with Join at this time." {
				return fmt.Errorf("broadcast during join: %v", err)
			}
		}
		last, err := r.Join(ctx)
		if err != nil {
			return err
		}
		if last != 1 {
			return fmt.Errorf("last joined %d, want 1", last)
		}
		return nil
	})
	// After everyone joined, collectives work normally again.
	c.each(t, func(r *Runtime, rank int) error {
		_, err := r.Allgather(ctxT(t), fill(tensor.Float32, 1, 1), "after.join")
		return err
	})
}

func TestAdasum(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		// Orthogonal vectors add; parallel equal vectors stay.
		v := tensor.New(tensor.Float64, 2)
		v.Float64s()[rank] = 3
		out, err := r.Allreduce(ctxT(t), v, "ortho", Adasum)
		if err != nil {
			return err
		}
		if !slices.Equal(out.Float64s(), []float64{3, 3}) {
			return fmt.Errorf("orthogonal %v", out.Float64s())
		}
		p := fill(tensor.Float32, 4, 2)
		out, err = r.Allreduce(ctxT(t), p, "parallel", Adasum)
		if err != nil {
			return err
		}
		if math.Abs(float64(out.Float32s()[0])-2) > 1e-6 {
			return fmt.Errorf("parallel %v", out.Float32s())
		}
		return nil
	})
	c3 := startCluster(t, 3, testConfig())
	if _, err := c3.rts[0].AllreduceAsync(fill(tensor.Float32, 1, 1), "a", Adasum); err == nil ||
		!strings.Contains(err.Error(), "Running Adasum with non-power of 2 ranks is not supported yet.") {
		t.Fatalf("3 ranks: %v", err)
	}
}

func TestStallShutdown(t *testing.T) {
	cfg := testConfig()
	cfg.StallCheckTime = 30 * time.Millisecond
	cfg.StallShutdownTime = 60 * time.Millisecond
	c := startCluster(t, 2, cfg)
	h, err := c.rts[0].AllreduceAsync(fill(tensor.Float32, 1, 1), "stalled", Sum)
	if err != nil {
		t.Fatal(err)
	}
	err = h.Wait(ctxT(t))
	if !errors.Is(err, ErrShutdown) || !strings.Contains(err.Error(), "1!: [allreduce.stalled]") {
		t.Fatalf("got %v", err)
	}
}

func TestTimeline(t *testing.T) {
	cfg := testConfig()
	cfg.Timeline = filepath.Join(t.TempDir(), "timeline.json")
	cfg.TimelineMarkCycles = true
	c := startCluster(t, 2, cfg)
	c.each(t, func(r *Runtime, rank int) error {
		_, err := r.GroupedAllreduce(ctxT(t), []*tensor.Tensor{fill(tensor.Float32, 2, 1), fill(tensor.Float32, 2, 1)}, "tl", Sum)
		return err
	})
	// The loop may be writing while we read (a read can see half of a
	// write): the file must be valid JSON between its writes.
	var ev []map[string]any
	var b []byte
	var err error
	for try := 0; ; try++ {
		if b, err = os.ReadFile(cfg.Timeline); err != nil {
			t.Fatal(err)
		}
		if err = json.Unmarshal(b, &ev); err == nil {
			break
		}
		if try == 20 {
			t.Fatalf("timeline is not valid JSON while running: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The last cycle's events are flushed at the end of the cycle, after
	// the handles completed: read the file again once the loops stopped.
	for _, r := range c.rts {
		r.Shutdown()
	}
	if b, err = os.ReadFile(cfg.Timeline); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("timeline is not valid JSON after shutdown: %v", err)
	}
	if err := timeline.Validate(bytes.NewReader(b)); err != nil {
		t.Errorf("timeline after shutdown: %v", err)
	}
	for _, want := range []string{"allreduce.tl_1of2", "NEGOTIATE_ALLREDUCE", `"ALLREDUCE"`, "CYCLE_START",
		"MEMCPY_IN_FUSION_BUFFER", "MPI_ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("timeline lacks %s", want)
		}
	}
}

func TestPlacement(t *testing.T) {
	group := memcomm.NewGroupNodes(2, 2)
	rts := make([]*Runtime, 4)
	done := make(chan error, 4)
	for i := range rts {
		rts[i] = new(Runtime)
		go func(i int) { done <- rts[i].Init(WithCommunicator(group[i]), WithConfig(testConfig())) }(i)
	}
	for range rts {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, r := range rts {
			r.Shutdown()
		}
	}()
	for i, r := range rts {
		lr := r.LocalRank()
		ls := r.LocalSize()
		cr := r.CrossRank()
		cs := r.CrossSize()
		sz := r.Size()
		if lr != i%2 || ls != 2 || cr != i/2 || cs != 2 || sz != 4 {
			t.Errorf("rank %d: local %d/%d cross %d/%d size %d", i, lr, ls, cr, cs, sz)
		}
	}
	if _, err := rts[0].MPIThreadsSupported(); err == nil {
		t.Error("MPIThreadsSupported without MPI: no error")
	}
}

func TestAllreduceGroup(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	// Rank 1 starts its first step only after rank 0 has tried a second
	// Start, so that the group cannot have completed in between.
	checked := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(checked) }) }
	defer release()
	c.each(t, func(r *Runtime, rank int) error {
		if rank == 0 {
			defer release()
		}
		ts := make([]*tensor.Tensor, 50)
		names := make([]string, len(ts))
		for i := range ts {
			ts[i] = fill(tensor.Float32, i+1, 1)
			names[i] = fmt.Sprintf("layer%d", i)
		}
		g, err := r.NewAllreduceGroup(ts, names, Sum)
		if err != nil {
			return err
		}
		for step := 1; step <= 3; step++ {
			if step == 1 && rank == 1 {
				<-checked
			}
			h, err := g.Start()
			if err != nil {
				return err
			}
			if step == 1 && rank == 0 {
				_, err := g.Start()
				release()
				if !errors.Is(err, ErrDuplicateName) {
					return fmt.Errorf("second start while running: %v", err)
				}
			}
			if err := h.Wait(ctxT(t)); err != nil {
				return err
			}
			want := float32(int(1) << step) // doubles each step
			for i, x := range ts {
				if x.Float32s()[i] != want {
					return fmt.Errorf("step %d tensor %d: %v", step, i, x.Float32s()[i])
				}
			}
		}
		return nil
	})
}

// TestAllreduceGroupHoldsItsNames checks the life of a group's names: held
// from NewAllreduceGroup to Close (no other operation or group may use
// them, in flight or not), free again after Close; a closed group, or one
// from before a Shutdown, does not start; Close fails while a step is in
// flight; a step in flight at Shutdown fails rather than hangs; and a rank
// that has joined contributes zeros for a group it never started.
func TestAllreduceGroupHoldsItsNames(t *testing.T) {
	c := startCluster(t, 2, testConfig())
	r0 := c.rts[0]
	ts := []*tensor.Tensor{fill(tensor.Float32, 2, 1), fill(tensor.Float32, 3, 1)}
	names := []string{"w", "b"}
	g, err := r0.NewAllreduceGroup(ts, names, Sum)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r0.AllreduceAsync(fill(tensor.Float32, 1, 1), "w", Sum); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("allreduce of a group's idle name: %v, want ErrDuplicateName", err)
	}
	if _, err := r0.NewAllreduceGroup([]*tensor.Tensor{fill(tensor.Float32, 1, 1)}, []string{"b"}, Sum); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("second group over a held name: %v, want ErrDuplicateName", err)
	}
	h, err := g.Start()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("close in flight: %v, want ErrDuplicateName", err)
	}
	// Rank 1 has joined: rank 0's step completes with its own values.
	joined, err := c.rts[1].JoinAsync()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := ts[1].Float32s()[2]; got != 1 {
		t.Errorf("with rank 1 joined: %v, want 1 (its zeros added)", got)
	}
	if _, err := r0.Join(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := joined.Wait(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := g.Start(); !errors.Is(err, ErrGroupClosed) {
		t.Errorf("start after close: %v, want ErrGroupClosed", err)
	}
	// The names are free again: a plain allreduce on both ranks.
	c.each(t, func(r *Runtime, rank int) error {
		return r.AllreduceInPlace(ctxT(t), fill(tensor.Float32, 1, 1), "w", Sum)
	})

	// A step in flight when the runtime stops fails; the group does not
	// start on the runtime initialised again.
	g2, err := r0.NewAllreduceGroup(ts, names, Sum)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := g2.Start() // rank 1 never starts it
	if err != nil {
		t.Fatal(err)
	}
	c.each(t, func(r *Runtime, rank int) error { return r.Shutdown() })
	if err := h2.Wait(ctxT(t)); !errors.Is(err, ErrShutdown) {
		t.Errorf("step in flight at shutdown: %v, want ErrShutdown", err)
	}
	one := memcomm.NewGroup(1)
	defer one[0].Close()
	if err := r0.Init(WithCommunicator(one[0]), WithConfig(testConfig()), WithLogger(zerolog.Nop())); err != nil {
		t.Fatal(err)
	}
	defer r0.Shutdown()
	if _, err := g2.Start(); !errors.Is(err, ErrGroupClosed) {
		t.Errorf("start after shutdown: %v, want ErrGroupClosed", err)
	}
}
