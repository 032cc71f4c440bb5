//go:build !mpi || !cgo

package runtime_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/fault"
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
	group := comm.NewGroup(3)
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
