//go:build !mpi || !cgo

package runtime

import (
	"fmt"
	"testing"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// stagePiece is the staging piece of these tests: 250 float32s, so that
// the tensors below end in a shorter piece.
const stagePiece = 1000

// TestGPUStagedInPieces reduces GPU tensors staged through the host in
// pieces that do not divide them: one tensor of 1237 float32s (four
// pieces of 250 and one of 237) and a fused group of 601 (two and 101),
// and checks every element and that each piece was one host allreduce.
func TestGPUStagedInPieces(t *testing.T) {
	const n = 3
	c := startGPUCluster(t, n, gpuSetup{opts: []Option{withStagePiece(stagePiece)}})
	fusedStep(t, c, 1, "warm") // agree on GPU support first
	before := make([]cuda.FakeStats, n)
	host := make([]int64, n)
	for i, d := range c.devs {
		before[i] = d.Stats()
		host[i] = c.counts[i].dataAllreduce.Load()
	}
	c.each(t, func(r *Runtime, rank int) error {
		d := c.devs[rank]
		x, err := toDev(d, seq(float32(10*rank), 1237))
		if err != nil {
			return err
		}
		defer cuda.FreeTensor(d, x)
		if err := r.AllreduceInPlace(ctxT(t), x, "big", Sum); err != nil {
			return err
		}
		got, err := hostOf(d, x, false)
		if err != nil {
			return err
		}
		// Sum over ranks of 10*rank + i.
		return wantEach(got, func(i int) float32 { return float32(10*(0+1+2) + n*i) })
	})
	for i, d := range c.devs {
		s := d.Stats()
		if got := s.StagePieces - before[i].StagePieces; got != 5 {
			t.Errorf("rank %d: %d pieces staged, want 5", i, got)
		}
		if got := c.counts[i].dataAllreduce.Load() - host[i]; got != 5 {
			t.Errorf("rank %d: %d host allreduces, want one per piece (5)", i, got)
		}
		before[i] = s
	}
	fusedStep(t, c, 3, "group") // 10+11+12 float32s: one piece
	for i, d := range c.devs {
		if got := d.Stats().StagePieces - before[i].StagePieces; got != 1 {
			t.Errorf("rank %d: %d pieces staged for 132 bytes, want 1", i, got)
		}
	}
	c.each(t, func(r *Runtime, rank int) error {
		return groupedAverageOnDevice(t, r, c.devs[rank], rank, n)
	})
}

// groupedAverageOnDevice averages a group of three device tensors (100, 200
// and 301 float32s, rank+k+i at element i of tensor k) over n ranks on d and
// checks every element.
func groupedAverageOnDevice(t *testing.T, r *Runtime, d cuda.Device, rank, n int) error {
	var ts []*tensor.Tensor
	for k, m := range []int{100, 200, 301} {
		x, err := toDev(d, seq(float32(rank+k), m))
		if err != nil {
			return err
		}
		defer cuda.FreeTensor(d, x)
		ts = append(ts, x)
	}
	h, err := r.GroupedAllreduceAsyncInPlace(ts, "grads", Average)
	if err != nil {
		return err
	}
	if err := h.Wait(ctxT(t)); err != nil {
		return err
	}
	for k, x := range ts {
		got, err := hostOf(d, x, false)
		if err != nil {
			return err
		}
		if err := wantEach(got, func(i int) float32 { return float32(n-1)/2 + float32(k+i) }); err != nil {
			return fmt.Errorf("tensor %d: %w", k, err)
		}
	}
	return nil
}

// TestGPUStagedPieceFault fails the host allreduce of one piece on rank 1
// (the first piece, then the last, shorter one) and checks that every
// rank's handle fails with the cause, naming rank 1, instead of hanging.
func TestGPUStagedPieceFault(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		name  string
		magic int // the failing piece's elements
	}{{"first piece", stagePiece / 4}, {"last piece", 1237 - 4*stagePiece/4}} {
		t.Run(tc.name, func(t *testing.T) {
			injected := fmt.Errorf("injected transport failure in the %s", tc.name)
			traps := make([]*trap, n)
			wrap := func(i int, m comm.Communicator) comm.Communicator {
				traps[i] = &trap{Communicator: m, magic: -2}
				if i == 1 {
					traps[i].magic, traps[i].err = tc.magic, injected
				}
				return traps[i]
			}
			c := startGPUCluster(t, n, gpuSetup{wrap: wrap, opts: []Option{withStagePiece(stagePiece)}})
			hs := make([]*Handle, n)
			var xs []*tensor.Tensor
			t.Cleanup(func() {
				for i, x := range xs {
					cuda.FreeTensor(c.devs[i], x)
				}
			})
			for rank, r := range c.rts {
				x, err := toDev(c.devs[rank], fill(tensor.Float32, 1237, 1))
				if err != nil {
					t.Fatal(err)
				}
				xs = append(xs, x)
				if hs[rank], err = r.AllreduceAsync(x, "big", Sum); err != nil {
					t.Fatalf("rank %d: %v", rank, err)
				}
			}
			checkFaultErrors(t, &c.cluster, hs, injected)
			if !traps[1].fired.Load() {
				t.Fatal("the fault was never injected")
			}
		})
	}
}
