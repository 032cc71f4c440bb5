//go:build linux && (amd64 || arm64) && !nogpu && (!mpi || !cgo)

package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/internal/cudamock"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// mockGPUCluster is n runtimes over one in-memory group, each with its
// own stream on device 0 of the mock CUDA runtime (a real *cuda.GPU, loaded
// through purego), staging through host memory in pieces of stagePiece
// bytes.
func mockGPUCluster(t *testing.T, n int) (*cluster, []*cuda.GPU, string) {
	t.Helper()
	cudart, _ := cudamock.Libraries(t, cudamock.CUDA130)
	rt, err := cuda.OpenRuntime(cuda.LoadConfig{CudartPath: cudart})
	if err != nil {
		t.Fatal(err)
	}
	group := memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: 30 * time.Second})
	c := &cluster{rts: make([]*Runtime, n), counts: make([]*counting, n)}
	devs := make([]*cuda.GPU, n)
	errs := make(chan error, n)
	for i := range n {
		if devs[i], err = rt.OpenDevice(0); err != nil {
			t.Fatal(err)
		}
		c.rts[i] = new(Runtime)
		c.counts[i] = &counting{Communicator: group[i]}
		go func(i int) {
			errs <- c.rts[i].Init(WithCommunicator(abortable{c.counts[i]}), WithConfig(testConfig()), WithLogger(zerolog.Nop()),
				WithGPU(devs[i]), WithoutNCCL(), withStagePiece(stagePiece))
		}(i)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, r := range c.rts {
			r.Shutdown()
		}
		group[0].Close()
		for _, d := range devs {
			d.Close()
		}
	})
	return c, devs, cudart
}

// abortable is counting that can still tear the group down (Aborter), as
// the real transports can: a rank that fails in the middle of a
// collective aborts the others.
type abortable struct{ *counting }

func (a abortable) Abort(cause error) error {
	return a.counting.Communicator.(comm.Aborter).Abort(cause)
}

// TestGPUMockStagedInPieces reduces through the real GPU.Stage (copies to
// the host on the device's stream, back on a second one, pinned buffers)
// at np 2: a tensor of 1237 float32s (pieces of 250, the last of 237) and
// a fused group of 100, 200 and 301, every element checked, each piece one
// host allreduce, the fusion buffer's copies one batch call each way.
func TestGPUMockStagedInPieces(t *testing.T) {
	const n = 2
	c, devs, cudart := mockGPUCluster(t, n)
	c.each(t, func(r *Runtime, rank int) error { // agree on GPU support first
		x, err := toDev(devs[rank], seq(1, 4))
		if err != nil {
			return err
		}
		defer cuda.FreeTensor(devs[rank], x)
		return r.AllreduceInPlace(ctxT(t), x, "warm", Sum)
	})
	before := make([]int64, n)
	for i := range n {
		before[i] = c.counts[i].dataAllreduce.Load()
	}
	c.each(t, func(r *Runtime, rank int) error {
		x, err := toDev(devs[rank], seq(float32(10*rank), 1237))
		if err != nil {
			return err
		}
		defer cuda.FreeTensor(devs[rank], x)
		if err := r.AllreduceInPlace(ctxT(t), x, "big", Sum); err != nil {
			return err
		}
		got, err := hostOf(devs[rank], x, false)
		if err != nil {
			return err
		}
		return wantEach(got, func(i int) float32 { return float32(10 + n*i) })
	})
	for i := range n {
		if got := c.counts[i].dataAllreduce.Load() - before[i]; got != 5 {
			t.Errorf("rank %d: %d host allreduces, want one per piece (5)", i, got)
		}
	}
	counts := cudamock.Counts(t, cudart)
	c.each(t, func(r *Runtime, rank int) error {
		return groupedAverageOnDevice(t, r, devs[rank], rank, n)
	})
	// The fusion buffer is filled and emptied with one cudaMemcpyBatchAsync
	// each way on each rank.
	after := cudamock.Counts(t, cudart)
	if batches, copies := after[1]-counts[1], after[2]-counts[2]; batches != 2*n || copies != 2*3*n {
		// Say what happened instead: the batch call refused (and why),
		// the copies made one at a time, or the tensors not fused.
		var why strings.Builder
		for rank, d := range devs {
			fmt.Fprintf(&why, "; rank %d: batch refused: %v, fused bytes copied: %d", rank, d.BatchRefused(), c.rts[rank].Stats().FusedCopied)
		}
		t.Errorf("%d cudaMemcpyBatchAsync calls of %d copies for a fused allreduce of 3 tensors at np %d, want %d of %d "+
			"(mock counters before %v, after %v: memcpyAsync, batch calls, batched copies, stream waits, streams)%s",
			batches, copies, n, 2*n, 2*3*n, counts, after, why.String())
	}
}

// TestGPUMockStagedCopyFault: the mock runtime fails a copy to the host
// in the middle of a staged allreduce (the third of the step, on whichever
// rank makes it). Both handles fail instead of hanging: the rank whose
// copy failed with the CUDA error, the other naming that rank.
func TestGPUMockStagedCopyFault(t *testing.T) {
	const n = 2
	c, devs, cudart := mockGPUCluster(t, n)
	xs := make([]*tensor.Tensor, n)
	for rank := range n {
		x, err := toDev(devs[rank], fill(tensor.Float32, 1237, 1))
		if err != nil {
			t.Fatal(err)
		}
		xs[rank] = x
	}
	t.Cleanup(func() {
		for rank, x := range xs {
			cuda.FreeTensor(devs[rank], x)
		}
	})
	// A first allreduce agrees on GPU support; the fault hits the second.
	c.each(t, func(r *Runtime, rank int) error { return r.AllreduceInPlace(ctxT(t), xs[rank], "warm", Sum) })
	cudamock.FailCopy(t, cudart, cudamock.DtoH, 3, cudamock.Illegal)
	hs := make([]*Handle, n)
	for rank, r := range c.rts {
		var err error
		if hs[rank], err = r.AllreduceAsync(xs[rank], "big", Sum); err != nil {
			t.Fatal(err)
		}
	}
	errs := make([]error, n)
	failed := -1
	for rank, h := range hs {
		errs[rank] = h.Wait(ctxT(t))
		if errs[rank] == nil {
			t.Fatalf("rank %d: the allreduce succeeded", rank)
		}
		var cerr *cuda.Error
		if errors.As(errs[rank], &cerr) && cerr.Name == "cudaErrorIllegalAddress" {
			if failed >= 0 {
				t.Fatalf("both ranks report the copy's error: %v; %v", errs[0], errs[1])
			}
			failed = rank
		}
	}
	if failed < 0 {
		t.Fatalf("no rank reports the failed copy: %v; %v", errs[0], errs[1])
	}
	other := 1 - failed
	if r, cause, ok := FailedRank(errs[other]); !ok || r != failed || !strings.Contains(cause, "cudaErrorIllegalAddress") {
		t.Errorf("rank %d: %v does not name rank %d and its cause", other, errs[other], failed)
	}
}
