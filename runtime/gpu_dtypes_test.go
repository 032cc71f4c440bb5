//go:build !mpi || !cgo

package runtime

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/tensor"
)

// NCCL has no int16 or uint16: with NCCL available, their collectives on
// device tensors are staged through the host communicator, while bool goes
// through NCCL as bytes with "or" as the byte maximum.
func TestGPUNewDTypesWithNCCL(t *testing.T) {
	c := startGPUCluster(t, 2, gpuSetup{nccl: true})
	c.each(t, func(r *Runtime, rank int) error {
		d := c.devs[rank]
		run := func(h *tensor.Tensor, name string, op ReduceOp) ([]int64, error) {
			x, err := cuda.ToDevice(d, h)
			if err != nil {
				return nil, err
			}
			defer cuda.FreeTensor(d, x)
			if err := r.AllreduceInPlace(ctxT(t), x, name, op); err != nil {
				return nil, err
			}
			back, err := cuda.ToHost(d, x)
			if err != nil {
				return nil, err
			}
			return values(back), nil
		}
		got, err := run(tensor.FromInt16([]int16{int16(-1000 * (rank + 1)), 7}), "i16", Sum)
		if err != nil {
			return err
		}
		if want := []int64{-3000, 14}; !slices.Equal(got, want) {
			return fmt.Errorf("int16 sum: got %v, want %v", got, want)
		}
		got, err = run(tensor.FromUint16([]uint16{uint16(60000 + rank), 3}), "u16", Max)
		if err != nil {
			return err
		}
		if want := []int64{60001, 3}; !slices.Equal(got, want) {
			return fmt.Errorf("uint16 max: got %v, want %v", got, want)
		}
		got, err = run(tensor.FromBool([]bool{rank == 0, false, true}), "b", Sum)
		if err != nil {
			return err
		}
		if want := []int64{1, 0, 1}; !slices.Equal(got, want) {
			return fmt.Errorf("bool or: got %v, want %v", got, want)
		}
		return nil
	})
	// Only the bool allreduce went through NCCL, once per rank.
	if k := c.nccl.Calls(); k.AllReduce != 2 {
		t.Errorf("%d NCCL allreduces, want 2 (bool only): %+v", k.AllReduce, k)
	}
}
