//go:build !mpi || !cgo

package runtime_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm/fault"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// Three ranks as goroutines (the in-memory transport) average a tensor.
func ExampleRunLocal() {
	ctx := context.Background()
	err := hvd.RunLocal(3, func(r *hvd.Runtime, rank int) error {
		t := tensor.FromFloat32([]float32{float32(rank), 10})
		if err := r.AllreduceInPlace(ctx, t, "x", hvd.Average); err != nil {
			return err
		}
		if rank == 0 {
			fmt.Println(t.Float32s())
		}
		return nil
	}, hvd.WithLogger(zerolog.Nop()))
	fmt.Println(err)
	// Output:
	// [1 10]
	// <nil>
}

// A program started without a launcher (no mpirun) is rank 0 of a job of
// one, in builds with and without MPI; started by `mpirun -np 4`, the same
// program is one of four ranks.
func ExampleInit() {
	if err := hvd.Init(); err != nil {
		fmt.Println(err)
		return
	}
	defer hvd.Shutdown()
	fmt.Println("rank", hvd.Rank(), "of", hvd.Size())
	sum, _ := hvd.Allreduce(context.Background(), tensor.FromFloat32([]float32{1, 2}), "x", hvd.Sum)
	fmt.Println(sum.Float32s())
	// Output:
	// rank 0 of 1
	// [1 2]
}

// Four ranks, each holding its rank and a one, sum and average their
// tensors; each rank learns the size from its Runtime.
func ExampleRuntime_Allreduce() {
	ctx := context.Background()
	err := hvd.RunLocal(4, func(r *hvd.Runtime, rank int) error {
		t := tensor.FromFloat32([]float32{float32(rank), 1})
		sum, err := r.Allreduce(ctx, t, "grad", hvd.Sum)
		if err != nil {
			return err
		}
		avg, err := r.Allreduce(ctx, t, "grad", hvd.Average)
		if err != nil {
			return err
		}
		if rank == 0 {
			fmt.Println("size", r.Size(), "sum", sum.Float32s(), "average", avg.Float32s())
		}
		return nil
	}, hvd.WithLogger(zerolog.Nop()))
	fmt.Println(err)
	// Output:
	// size 4 sum [6 4] average [1.5 1]
	// <nil>
}

// A model's gradients, allreduced in place as one group, step after step:
// the group is built once, each step is Start then Wait, and Close releases
// the names.
func ExampleRuntime_NewAllreduceGroup() {
	ctx := context.Background()
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		weights := tensor.FromFloat32(make([]float32, 3))
		bias := tensor.FromFloat32(make([]float32, 1))
		g, err := r.NewAllreduceGroup([]*tensor.Tensor{weights, bias}, []string{"w", "b"}, hvd.Average)
		if err != nil {
			return err
		}
		defer g.Close()
		for step := range 3 {
			// Backward fills the gradients: rank r's are step+r.
			for i := range weights.Float32s() {
				weights.Float32s()[i] = float32(step + rank)
			}
			bias.Float32s()[0] = float32(10 * (step + rank))
			h, err := g.Start()
			if err != nil {
				return err
			}
			if err := h.Wait(ctx); err != nil {
				return err
			}
			if rank == 0 {
				fmt.Println("step", step, weights.Float32s(), bias.Float32s())
			}
		}
		return nil
	}, hvd.WithLogger(zerolog.Nop()))
	fmt.Println(err)
	// Output:
	// step 0 [0.5 0.5 0.5] [5]
	// step 1 [1.5 1.5 1.5] [15]
	// step 2 [2.5 2.5 2.5] [25]
	// <nil>
}

// Ranks with uneven data: rank r has r+1 batches. A rank that runs out
// joins; until all have, the others' allreduces go on with zeros from it.
// Join returns the rank that joined last.
func ExampleRuntime_Join() {
	ctx := context.Background()
	err := hvd.RunLocal(3, func(r *hvd.Runtime, rank int) error {
		var sums []float32
		for batch := range rank + 1 {
			t := tensor.FromFloat32([]float32{1})
			if err := r.AllreduceInPlace(ctx, t, fmt.Sprint("batch", batch), hvd.Sum); err != nil {
				return err
			}
			sums = append(sums, t.Float32s()[0])
		}
		last, err := r.Join(ctx)
		if err != nil {
			return err
		}
		if rank == 2 {
			fmt.Println("rank 2 sums", sums, "last joined", last)
		}
		return nil
	}, hvd.WithLogger(zerolog.Nop()))
	fmt.Println(err)
	// Output:
	// rank 2 sums [3 2 1] last joined 2
	// <nil>
}

// When one rank stops the job, the others' errors say which rank and why:
// here rank 2 calls Shutdown while rank 0 waits for a tensor that the
// others never submit.
func ExampleRankError() {
	rts, _ := hvd.StartLocal(3, hvd.WithLogger(zerolog.Nop()))
	defer hvd.StopLocal(rts)
	h, _ := rts[0].AllreduceAsync(tensor.FromFloat32([]float32{1}), "orphan", hvd.Sum)
	rts[2].Shutdown()
	err := h.Wait(context.Background())
	var re *hvd.RankError
	fmt.Println(errors.Is(err, hvd.ErrShutdown), errors.As(err, &re), re)
	// Output: true true hvd: rank 2 called Shutdown
}

// A transport that fails under rank 1 in the middle of training (here
// injected by package fault: its 30th allreduce fails and aborts the group)
// fails every rank's step; the other ranks learn which rank failed and why.
func ExampleFailedRank() {
	linkDown := errors.New("link down")
	group := memcomm.NewGroup(3)
	group[1] = fault.Wrap(group[1], fault.Rule{Kind: fault.Allreduce, Call: 30, Abort: true, Err: linkDown})
	rts := make([]*hvd.Runtime, 3)
	errs := make(chan error, 3)
	for i := range rts {
		rts[i] = new(hvd.Runtime)
		go func() { errs <- rts[i].Init(hvd.WithCommunicator(group[i]), hvd.WithLogger(zerolog.Nop())) }()
	}
	for range rts {
		if err := <-errs; err != nil {
			fmt.Println(err)
			return
		}
	}
	failures := make([]error, 3)
	done := make(chan struct{})
	for i, r := range rts {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				t := tensor.FromFloat32([]float32{1, 2, 3})
				if err := r.AllreduceInPlace(context.Background(), t, "grad", hvd.Average); err != nil {
					failures[i] = err
					return
				}
			}
		}()
	}
	for range rts {
		<-done
	}
	for i, err := range failures {
		if rank, cause, ok := hvd.FailedRank(err); ok {
			fmt.Printf("rank %d: rank %d failed: %s\n", i, rank, cause)
		} else {
			fmt.Printf("rank %d: own transport failed: %v\n", i, errors.Is(err, linkDown))
		}
	}
	for _, r := range rts {
		r.Shutdown()
	}
	// Output:
	// rank 0: rank 1 failed: link down
	// rank 1: own transport failed: true
	// rank 2: rank 1 failed: link down
}

// Two ranks gather a group of tensors of different dtypes and first
// dimensions with one call: a bool mask (one row on rank 0, two on rank 1)
// and int16 ids.
func ExampleRuntime_GroupedAllgather() {
	ctx := context.Background()
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		mask := tensor.FromBool([]bool{rank == 0, true}[:rank+1])
		ids := tensor.FromInt16([]int16{int16(100 * rank)})
		outs, err := r.GroupedAllgather(ctx, []*tensor.Tensor{mask, ids}, "batch")
		if err != nil {
			return err
		}
		if rank == 0 {
			fmt.Println(outs[0].Bools(), outs[1].Int16s())
		}
		return nil
	}, hvd.WithLogger(zerolog.Nop()))
	fmt.Println(err)
	// Output:
	// [true false true] [0 100]
	// <nil>
}

// Four ranks split into two process sets, the even and the odd ranks, that
// reduce a tensor of the same name at the same time, each among its own
// members.
func ExampleRuntime_AddProcessSet() {
	ctx := context.Background()
	sums := make([]float32, 4)
	err := hvd.RunLocal(4, func(r *hvd.Runtime, rank int) error {
		even, err := r.AddProcessSet(ctx, []int{0, 2}) // every rank adds every set, in the same order
		if err != nil {
			return err
		}
		odd, err := r.AddProcessSet(ctx, []int{1, 3})
		if err != nil {
			return err
		}
		mine := even
		if !even.Included() {
			mine = odd
		}
		t := tensor.FromFloat32([]float32{float32(rank)})
		if err := r.AllreduceInPlace(ctx, t, "x", hvd.Sum, hvd.InProcessSet(mine)); err != nil {
			return err
		}
		sums[rank] = t.Float32s()[0]
		if rank == 0 {
			fmt.Println(even, odd)
		}
		return nil
	}, hvd.WithLogger(zerolog.Nop()), hvd.WithDynamicProcessSets())
	fmt.Println(sums, err)
	// Output:
	// ProcessSet(process_set_id=1, ranks=[0, 2], mpi_comm=None) ProcessSet(process_set_id=2, ranks=[1, 3], mpi_comm=None)
	// [2 4 2 4] <nil>
}

// A training loop reduces the same names in the same order every step:
// after GOHOROVOD_STATIC_SCHEDULE such steps in a row (here 2, through the
// configuration) the background loop locks a static schedule and stops
// running an agreement every cycle; each step's tensor is then reduced
// after one small header. A rank that submits anything else ends it on
// every rank, and negotiation takes over again.
func ExampleRuntime_Stats_staticSchedule() {
	ctx := context.Background()
	cfg := config.Default()
	cfg.StaticSchedule = 2
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		w := tensor.FromFloat32([]float32{1, 2})
		for range 5 {
			if err := r.AllreduceInPlace(ctx, w, "w", hvd.Average); err != nil {
				return err
			}
		}
		// Anything outside the schedule dissolves it.
		if _, err := r.Allreduce(ctx, tensor.FromFloat32([]float32{1}), "loss", hvd.Sum); err != nil {
			return err
		}
		if rank == 0 {
			s := r.Stats()
			fmt.Println("locked:", s.StaticLocks, "steps on the schedule:", s.StaticUnits, "dissolved:", s.StaticDissolved)
		}
		return nil
	}, hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()))
	fmt.Println(err)
	// Output:
	// locked: 1 steps on the schedule: 2 dissolved: 1
	// <nil>
}

// Gradients that lie back to back in one buffer (tensor.NewFlat, or an
// optimizer's FlatGradients) are reduced in one call where they lie once
// the static schedule has locked, whatever their sizes and however many
// buckets they were started in: the schedule's header tells every rank
// that every rank has them in one run of memory.
func ExampleRuntime_Stats_staticRuns() {
	ctx := context.Background()
	cfg := config.Default()
	cfg.StaticSchedule = 2
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		_, grads := tensor.NewFlat(tensor.Float32, tensor.Shape{3}, tensor.Shape{128, 256}, tensor.Shape{5})
		g, err := r.NewAllreduceGroup(grads, []string{"b1", "w2", "b2"}, hvd.Sum)
		if err != nil {
			return err
		}
		defer g.Close()
		for range 5 {
			for _, t := range grads {
				for i := range t.Float32s() {
					t.Float32s()[i] = 1
				}
			}
			h, err := g.Start()
			if err != nil {
				return err
			}
			if err := h.Wait(ctx); err != nil {
				return err
			}
		}
		if rank == 0 {
			s := r.Stats()
			fmt.Println("sum:", grads[1].Float32s()[0], "steps on the schedule:", s.StaticUnits, "in one call each:", s.StaticRuns)
		}
		return nil
	}, hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()))
	fmt.Println(err)
	// Output:
	// sum: 2 steps on the schedule: 2 in one call each: 2
	// <nil>
}
