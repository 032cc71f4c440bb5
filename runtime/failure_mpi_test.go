//go:build (mpi && cgo) || gloo

package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
	"github.com/rs/zerolog"
)

// mpiRuntimeWith starts a Runtime over the job's world (worldOpts) with cfg.
func mpiRuntimeWith(t *testing.T, cfg config.Config) *Runtime {
	t.Helper()
	r := new(Runtime)
	if err := r.Init(append(worldOpts(t), WithConfig(cfg), WithLogger(zerolog.Nop()))...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Shutdown()
		world.Barrier()
	})
	return r
}

// TestMPIJoinAfterCachedAllgather is a past defect (Join after cached
// allgathers) under mpirun:
// allgathers (the second and third from the response cache), then Join on
// every rank, with the default cache, a one-entry cache and none.
func TestMPIJoinAfterCachedAllgather(t *testing.T) {
	for _, capacity := range []int{1024, 1, 0} {
		t.Run(fmt.Sprint("cache", capacity), func(t *testing.T) {
			cfg := testConfig()
			cfg.CacheCapacity = capacity
			r := mpiRuntimeWith(t, cfg)
			rank := r.Rank()
			size := r.Size()
			for i := 0; i < 3; i++ {
				out, err := r.Allgather(mpiCtx(t), tensor.FromFloat32([]float32{float32(rank), 1}), "x")
				if err != nil {
					t.Fatal(err)
				}
				if out.Len() != 2*size || out.Float32s()[2*(size-1)] != float32(size-1) {
					t.Fatalf("allgather %v", out.Float32s())
				}
			}
			last, err := r.Join(mpiCtx(t))
			if err != nil {
				t.Fatalf("join: %v", err)
			}
			if last < 0 || last >= size {
				t.Fatalf("join returned %d", last)
			}
			v := tensor.FromFloat32([]float32{1})
			if err := r.AllreduceInPlace(mpiCtx(t), v, "after", Sum); err != nil {
				t.Fatalf("allreduce after join: %v", err)
			}
			if v.Float32s()[0] != float32(size) {
				t.Fatalf("allreduce after join gave %v", v.Float32s())
			}
		})
	}
}

// TestMPIShutdownNamesTheRank: the last rank calls Shutdown while rank 0
// waits on a name nobody else submits; rank 0's error names that rank.
func TestMPIShutdownNamesTheRank(t *testing.T) {
	r := mpiRuntimeWith(t, testConfig())
	rank := r.Rank()
	size := r.Size()
	var h *Handle
	if rank == 0 {
		var err error
		if h, err = r.AllreduceAsync(fill(tensor.Float32, 1, 1), "orphan", Sum); err != nil {
			t.Fatal(err)
		}
	}
	world.Barrier()
	if rank == size-1 {
		if err := r.Shutdown(); err != nil {
			t.Fatal(err)
		}
		return
	}
	// The ranks in between wait for the stop, so that their own
	// Shutdown (at cleanup) does not race rank size-1's.
	select {
	case <-r.stopped:
	case <-mpiCtx(t).Done():
		t.Fatal("the runtime did not stop")
	}
	if rank == 0 {
		err := h.Wait(mpiCtx(t))
		var re *RankError
		if !errors.Is(err, ErrShutdown) || !errors.As(err, &re) || re.Rank != size-1 ||
			!strings.Contains(err.Error(), fmt.Sprintf("rank %d called Shutdown", size-1)) {
			t.Fatalf("got %v, want ErrShutdown naming rank %d", err, size-1)
		}
	}
}
