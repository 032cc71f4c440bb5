package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/tensor"
)

// noLauncher clears the launcher variables for the test, so that Init
// runs as one rank alone.
func noLauncher(t *testing.T) {
	for _, v := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"} {
		t.Setenv(v, "")
	}
}

// checkOneRank runs every kind of collective on r, a runtime of one rank,
// and checks that each returns its input (as Horovod at size 1 does).
func checkOneRank(ctx context.Context, r *Runtime) error {
	if p := []int{r.Rank(), r.Size(), r.LocalRank(), r.LocalSize(), r.CrossRank(), r.CrossSize()}; !slices.Equal(p, []int{0, 1, 0, 1, 0, 1}) {
		return fmt.Errorf("rank, size, local and cross rank and size %v, want 0 1 0 1 0 1", p)
	}
	in := []float32{1, 2, 3, 4}
	for _, op := range []ReduceOp{Sum, Average, Min, Max} {
		out, err := r.Allreduce(ctx, tensor.FromFloat32(in), "", op)
		if err != nil {
			return fmt.Errorf("allreduce %v: %w", op, err)
		}
		if !slices.Equal(out.Float32s(), in) {
			return fmt.Errorf("allreduce %v = %v, want %v", op, out.Float32s(), in)
		}
	}
	g, err := r.Allgather(ctx, tensor.FromFloat32(in, 2, 2), "gather")
	if err != nil || !slices.Equal(g.Float32s(), in) || !g.Shape().Equal(tensor.Shape{2, 2}) {
		return fmt.Errorf("allgather = %v, %v", g, err)
	}
	b := tensor.FromFloat32(slices.Clone(in))
	if err := r.BroadcastInPlace(ctx, b, 0, "bcast"); err != nil || !slices.Equal(b.Float32s(), in) {
		return fmt.Errorf("broadcast = %v, %v", b, err)
	}
	a, splits, err := r.Alltoall(ctx, tensor.FromFloat32(in, 4), nil, "a2a")
	if err != nil || !slices.Equal(a.Float32s(), in) || !slices.Equal(splits, []int{4}) {
		return fmt.Errorf("alltoall = %v %v, %v", a, splits, err)
	}
	rs, err := r.Reducescatter(ctx, tensor.FromFloat32(in, 4), "rs", Sum)
	if err != nil || !slices.Equal(rs.Float32s(), in) {
		return fmt.Errorf("reducescatter = %v, %v", rs, err)
	}
	if err := r.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if last, err := r.Join(ctx); err != nil || last != 0 {
		return fmt.Errorf("join = %d, %v; want 0", last, err)
	}
	return nil
}

// TestNotInitializedMessages: before Init the error is Horovod's, spelled
// for Go; package-level calls under RunLocal (whose Runtimes are not the
// default) say to use the *Runtime that RunLocal gives.
func TestNotInitializedMessages(t *testing.T) {
	prev := SetDefault(new(Runtime))
	defer SetDefault(prev)
	if n := running.Load(); n != 0 {
		t.Fatalf("%d Runtimes left running by earlier tests", n)
	}
	ctx := context.Background()
	err := Barrier(ctx)
	if err != ErrNotInitialized || err.Error() != "hvd: Horovod has not been initialized; use hvd.Init()." {
		t.Errorf("Barrier before Init = %v, want ErrNotInitialized with hvd.Init()", err)
	}

	var inside [2]error
	err = RunLocal(2, func(r *Runtime, rank int) error {
		inside[rank] = AllreduceInPlace(ctx, tensor.FromFloat32([]float32{1}), "x", Sum)
		return r.Barrier(ctx)
	}, WithConfig(testConfig()), WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	for rank, err := range inside {
		if !errors.Is(err, ErrNotInitialized) {
			t.Fatalf("rank %d: hvd.AllreduceInPlace under RunLocal = %v, want ErrNotInitialized", rank, err)
		}
		for _, w := range []string{"has not been initialized", "default Runtime", "2 other Runtimes are running",
			"RunLocal or StartLocal", "methods of the *Runtime it was given"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("rank %d: error %q does not say %q", rank, err, w)
			}
		}
	}
	// A Runtime of the program's own, not the default, keeps the plain
	// message even while others run.
	rts, err := StartLocal(1, WithConfig(testConfig()), WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	if err := new(Runtime).Barrier(ctx); err != ErrNotInitialized {
		t.Errorf("a new Runtime's Barrier = %v, want ErrNotInitialized", err)
	}
	if err := Barrier(ctx); err == ErrNotInitialized || !strings.Contains(err.Error(), "another Runtime is running") {
		t.Errorf("Barrier beside one running Runtime = %v", err)
	}
	if err := StopLocal(rts); err != nil {
		t.Fatal(err)
	}
	if err := Barrier(ctx); err != ErrNotInitialized {
		t.Errorf("Barrier after StopLocal = %v, want the plain ErrNotInitialized", err)
	}
}

// debugLog returns a logger at debug level into a buffer, to read Init's
// "hvd initialized" line.
func debugLog() (zerolog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return zerolog.New(&buf).Level(zerolog.DebugLevel), &buf
}
