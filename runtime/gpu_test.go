//go:build !mpi || !cgo

package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/nccl"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/tensor"
)

// gpuCluster is n runtimes over one in-memory group, each rank with its
// own fake device.
type gpuCluster struct {
	cluster
	devs  []*cuda.Fake
	nccl  *nccl.Fake
	group []comm.Communicator
	dcs   []*deviceMemComm
}

type gpuSetup struct {
	nccl      bool // a fake NCCL over a second in-memory group
	cudaAware bool // communicators that accept fake device memory
	noDevice  []int
	cfg       *config.Config
	// wrap, when set, wraps each rank's host communicator, and wrapNCCL
	// each member of the group under the fake NCCL (fault tests).
	wrap, wrapNCCL func(i int, c comm.Communicator) comm.Communicator
	opts           []Option // more options for every rank
}

func startGPUCluster(t *testing.T, n int, s gpuSetup) *gpuCluster {
	t.Helper()
	cfg := testConfig()
	if s.cfg != nil {
		cfg = *s.cfg
	}
	group := memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: 30 * time.Second})
	c := &gpuCluster{cluster: cluster{rts: make([]*Runtime, n), counts: make([]*counting, n)}, devs: make([]*cuda.Fake, n), group: group}
	var ncclGroup []comm.Communicator
	if s.nccl {
		ncclGroup = memcomm.NewGroupWith(n, memcomm.GroupOptions{Timeout: 30 * time.Second})
		members := ncclGroup
		if s.wrapNCCL != nil {
			members = make([]comm.Communicator, n)
			for i := range members {
				members[i] = s.wrapNCCL(i, ncclGroup[i])
			}
		}
		c.nccl = nccl.NewFake(members, nccl.FakeOptions{})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		c.rts[i] = new(Runtime)
		c.devs[i] = cuda.NewFake(cuda.FakeConfig{})
		var member comm.Communicator = group[i]
		if s.wrap != nil {
			member = s.wrap(i, member)
		}
		c.counts[i] = &counting{Communicator: member}
		var host comm.Communicator = c.counts[i]
		if s.cudaAware {
			dc := &deviceMemComm{Communicator: c.counts[i], dev: c.devs[i]}
			c.dcs = append(c.dcs, dc)
			host = dc
		}
		opts := []Option{WithCommunicator(host), WithConfig(cfg), WithLogger(zerolog.Nop())}
		skip := false
		for _, r := range s.noDevice {
			skip = skip || r == i
		}
		if !skip {
			opts = append(opts, WithGPU(c.devs[i]))
		}
		if c.nccl != nil {
			opts = append(opts, withNCCL(c.nccl))
		}
		opts = append(opts, s.opts...)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = c.rts[i].Init(opts...)
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d init: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, r := range c.rts {
			r.Shutdown()
		}
		group[0].Close()
		if ncclGroup != nil {
			ncclGroup[0].Close()
		}
		for i, d := range c.devs {
			if err := d.Close(); err != nil {
				t.Errorf("rank %d: %v", i, err)
			}
		}
	})
	return c
}

// deviceMemComm is a CUDA-aware communicator for fake devices: it accepts
// device tensors by reading the fake's memory, as a CUDA-aware MPI reads
// device memory (without regard to the device's stream).
type deviceMemComm struct {
	comm.Communicator
	dev     *cuda.Fake
	devOps  atomic.Int64
	devErrs atomic.Int64
}

func (c *deviceMemComm) AcceptsDeviceMemory() bool { return true }

func (c *deviceMemComm) host(t *tensor.Tensor) *tensor.Tensor {
	if t == nil || t.Device().Kind == tensor.CPU {
		return t
	}
	c.devOps.Add(1)
	if t.NumBytes() == 0 {
		return tensor.New(t.DType(), t.Shape()...)
	}
	b, err := c.dev.Bytes(t.DevicePtr(), t.NumBytes())
	if err != nil {
		c.devErrs.Add(1)
		panic(err)
	}
	h, err := tensor.FromBytes(t.DType(), b, t.Shape()...)
	if err != nil {
		panic(err)
	}
	return h
}

func (c *deviceMemComm) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	return c.Communicator.Allreduce(c.host(buf), op)
}
func (c *deviceMemComm) Allgatherv(send, recv *tensor.Tensor, counts []int) error {
	return c.Communicator.Allgatherv(c.host(send), c.host(recv), counts)
}
func (c *deviceMemComm) Bcast(buf *tensor.Tensor, root int) error {
	return c.Communicator.Bcast(c.host(buf), root)
}
func (c *deviceMemComm) Alltoallv(send *tensor.Tensor, sc []int, recv *tensor.Tensor, rc []int) error {
	return c.Communicator.Alltoallv(c.host(send), sc, c.host(recv), rc)
}
func (c *deviceMemComm) ReduceScatter(send, recv *tensor.Tensor, counts []int, op tensor.ReduceOp) error {
	return c.Communicator.ReduceScatter(c.host(send), c.host(recv), counts, op)
}

// seq returns a float32 tensor of the given shape with element i equal to
// base + i.
func seq(base float32, shape ...int) *tensor.Tensor {
	t := tensor.New(tensor.Float32, shape...)
	for i := range t.Float32s() {
		t.Float32s()[i] = base + float32(i)
	}
	return t
}

func toDev(d cuda.Device, h *tensor.Tensor) (*tensor.Tensor, error) { return cuda.ToDevice(d, h) }

// hostOf copies a device tensor back and frees it when free is set.
func hostOf(d cuda.Device, t *tensor.Tensor, free bool) ([]float32, error) {
	if t == nil {
		return nil, errors.New("nil result")
	}
	if t.Device().Kind != tensor.GPU {
		return nil, fmt.Errorf("result %v is not on the GPU", t)
	}
	h, err := cuda.ToHost(d, t)
	if err != nil {
		return nil, err
	}
	if free {
		if err := cuda.FreeTensor(d, t); err != nil {
			return nil, err
		}
	}
	return h.Float32s(), nil
}

func wantEach(got []float32, want func(i int) float32) error {
	for i, v := range got {
		if v != want(i) {
			return fmt.Errorf("element %d = %v, want %v (all %v)", i, v, want(i), got)
		}
	}
	return nil
}

// everyCollective runs each collective on GPU tensors at every rank and
// checks the results against what the host path would give.
func everyCollective(t *testing.T, c *gpuCluster) {
	n := len(c.rts)
	c.each(t, func(r *Runtime, rank int) error {
		d := c.devs[rank]
		ctx := ctxT(t)
		// Allreduce, out of place, every op: rank r holds r+1+i.
		for _, tt := range []struct {
			op   ReduceOp
			want func(i int) float32
		}{
			{Sum, func(i int) float32 { return float32(n*(n+1)/2 + n*i) }},
			{Average, func(i int) float32 { return float32(n+1)/2 + float32(i) }},
			{Min, func(i int) float32 { return float32(1 + i) }},
			{Max, func(i int) float32 { return float32(n + i) }},
		} {
			x, err := toDev(d, seq(float32(rank+1), 7))
			if err != nil {
				return err
			}
			out, err := r.Allreduce(ctx, x, "ar."+tt.op.String(), tt.op)
			if err != nil {
				return fmt.Errorf("allreduce %v: %w", tt.op, err)
			}
			got, err := hostOf(d, out, true)
			if err != nil {
				return err
			}
			if err := wantEach(got, tt.want); err != nil {
				return fmt.Errorf("allreduce %v: %w", tt.op, err)
			}
			in, _ := hostOf(d, x, true)
			if in[0] != float32(rank+1) {
				return fmt.Errorf("allreduce %v changed its input: %v", tt.op, in)
			}
		}
		// In place, with scale factors: (2*(r+1+i)) summed, halved.
		x, err := toDev(d, seq(float32(rank+1), 5))
		if err != nil {
			return err
		}
		if err := r.AllreduceInPlace(ctx, x, "ar.scaled", Sum, Prescale(2), Postscale(0.5)); err != nil {
			return err
		}
		got, _ := hostOf(d, x, true)
		if err := wantEach(got, func(i int) float32 { return float32(n*(n+1)/2 + n*i) }); err != nil {
			return fmt.Errorf("scaled allreduce: %w", err)
		}
		// Allgather: rank r sends r+1 rows of 2, filled with r.
		g := tensor.New(tensor.Float32, rank+1, 2)
		for i := range g.Float32s() {
			g.Float32s()[i] = float32(rank)
		}
		gd, err := toDev(d, g)
		if err != nil {
			return err
		}
		out, err := r.Allgather(ctx, gd, "ag")
		if err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
		if out.Shape()[0] != n*(n+1)/2 {
			return fmt.Errorf("allgather shape %v", out.Shape())
		}
		got, err = hostOf(d, out, true)
		if err != nil {
			return err
		}
		k := 0
		for src := 0; src < n; src++ {
			for j := 0; j < 2*(src+1); j++ {
				if got[k] != float32(src) {
					return fmt.Errorf("allgather: element %d = %v, want %v", k, got[k], src)
				}
				k++
			}
		}
		cuda.FreeTensor(d, gd)
		// Broadcast from the last rank, out of place and in place.
		b, err := toDev(d, seq(float32(100*rank), 6))
		if err != nil {
			return err
		}
		out, err = r.Broadcast(ctx, b, n-1, "bc")
		if err != nil {
			return fmt.Errorf("broadcast: %w", err)
		}
		got, _ = hostOf(d, out, true)
		if err := wantEach(got, func(i int) float32 { return float32(100*(n-1) + i) }); err != nil {
			return fmt.Errorf("broadcast: %w", err)
		}
		if err := r.BroadcastInPlace(ctx, b, 0, "bc.inplace"); err != nil {
			return err
		}
		got, _ = hostOf(d, b, true)
		if err := wantEach(got, func(i int) float32 { return float32(i) }); err != nil {
			return fmt.Errorf("in-place broadcast: %w", err)
		}
		// Alltoall: rank r sends j+1 rows (of 3) to rank j, valued 10r+j.
		splits := make([]int, n)
		rows := 0
		for j := range splits {
			splits[j] = j + 1
			rows += j + 1
		}
		a := tensor.New(tensor.Float32, rows, 3)
		k = 0
		for j := 0; j < n; j++ {
			for e := 0; e < 3*(j+1); e++ {
				a.Float32s()[k] = float32(10*rank + j)
				k++
			}
		}
		ad, err := toDev(d, a)
		if err != nil {
			return err
		}
		out, recv, err := r.Alltoall(ctx, ad, splits, "a2a")
		if err != nil {
			return fmt.Errorf("alltoall: %w", err)
		}
		got, _ = hostOf(d, out, true)
		cuda.FreeTensor(d, ad)
		k = 0
		for src := 0; src < n; src++ {
			if recv[src] != rank+1 {
				return fmt.Errorf("alltoall: received splits %v", recv)
			}
			for e := 0; e < 3*(rank+1); e++ {
				if got[k] != float32(10*src+rank) {
					return fmt.Errorf("alltoall: element %d = %v, want %v", k, got[k], 10*src+rank)
				}
				k++
			}
		}
		// Reducescatter of 2n+1 rows (uneven), averaged: rows hold r+row.
		rs := tensor.New(tensor.Float32, 2*n+1, 2)
		for i := range rs.Float32s() {
			rs.Float32s()[i] = float32(rank + i/2)
		}
		rd, err := toDev(d, rs)
		if err != nil {
			return err
		}
		out, err = r.Reducescatter(ctx, rd, "rs", Average)
		if err != nil {
			return fmt.Errorf("reducescatter: %w", err)
		}
		cuda.FreeTensor(d, rd)
		myRows := ReducescatterRows(2*n+1, n, rank)
		if out.Shape()[0] != myRows {
			return fmt.Errorf("reducescatter shape %v, want %d rows", out.Shape(), myRows)
		}
		first := 0
		for q := 0; q < rank; q++ {
			first += ReducescatterRows(2*n+1, n, q)
		}
		got, _ = hostOf(d, out, true)
		return wantEach(got, func(i int) float32 { return float32(n-1)/2 + float32(first+i/2) })
	})
}

func TestGPUStagedEveryCollective(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			c := startGPUCluster(t, n, gpuSetup{})
			everyCollective(t, c)
			for i, d := range c.devs {
				s := d.Stats()
				if s.DtoH == 0 || s.HtoD == 0 || s.HostAllocs == 0 {
					t.Errorf("rank %d: no staging through pinned host memory: %+v", i, s)
				}
			}
		})
	}
}

func TestGPUNCCLEveryCollective(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			c := startGPUCluster(t, n, gpuSetup{nccl: true})
			everyCollective(t, c)
			k := c.nccl.Calls()
			if k.UniqueIDs != 1 || k.Comms != n {
				t.Errorf("unique ids %d (want 1, drawn on rank 0), communicators %d (want %d)", k.UniqueIDs, k.Comms, n)
			}
			// Per rank: 5 allreduces (one averaged on the device), 1
			// allgather, 2 broadcasts, 1 alltoall, 1 reducescatter.
			want := nccl.FakeCalls{UniqueIDs: 1, Comms: n, AllReduce: 5 * n, Average: n, AllGather: n, Broadcast: 2 * n,
				ReduceScatter: n, AllToAll: n, AllReduceElems: k.AllReduceElems}
			if k != want {
				t.Errorf("NCCL calls %+v, want %+v", k, want)
			}
			for i, cnt := range c.counts {
				// One host allreduce: the ranks' agreement on GPU support.
				if got := cnt.dataAllreduce.Load(); got != 1 {
					t.Errorf("rank %d: %d data allreduces went through the host communicator, want 1", i, got)
				}
			}
			for _, r := range c.rts {
				r.Shutdown()
			}
			if got := c.nccl.Calls().Closed; got != n {
				t.Errorf("%d NCCL communicators closed at shutdown, want %d", got, n)
			}
		})
	}
}

func TestGPUCUDAAwareEveryCollective(t *testing.T) {
	c := startGPUCluster(t, 2, gpuSetup{cudaAware: true})
	everyCollective(t, c)
	for i, dc := range c.dcs {
		if dc.devOps.Load() == 0 {
			t.Errorf("rank %d: the CUDA-aware communicator was never given device memory", i)
		}
	}
}

// fusedStep reduces k small GPU tensors in one grouped allreduce on every
// rank and checks the results.
func fusedStep(t *testing.T, c *gpuCluster, k int, name string) {
	n := len(c.rts)
	c.each(t, func(r *Runtime, rank int) error {
		d := c.devs[rank]
		ts := make([]*tensor.Tensor, k)
		for i := range ts {
			var err error
			if ts[i], err = toDev(d, seq(float32(rank+i), 10+i)); err != nil {
				return err
			}
		}
		h, err := r.GroupedAllreduceAsyncInPlace(ts, name, Average)
		if err != nil {
			return err
		}
		if err := h.Wait(ctxT(t)); err != nil {
			return err
		}
		for i, x := range ts {
			got, err := hostOf(d, x, true)
			if err != nil {
				return err
			}
			if err := wantEach(got, func(j int) float32 { return float32(n-1)/2 + float32(i+j) }); err != nil {
				return fmt.Errorf("tensor %d: %w", i, err)
			}
		}
		return nil
	})
}

func TestGPUFusion(t *testing.T) {
	const k = 8
	for _, tt := range []struct {
		name string
		s    gpuSetup
	}{{"staged", gpuSetup{}}, {"nccl", gpuSetup{nccl: true}}} {
		t.Run(tt.name, func(t *testing.T) {
			c := startGPUCluster(t, 2, tt.s)
			fusedStep(t, c, 1, "warm") // agree on GPU support first
			before := make([]cuda.FakeStats, 2)
			for i, d := range c.devs {
				before[i] = d.Stats()
			}
			host0 := c.counts[0].dataAllreduce.Load()
			var nccl0 int
			if c.nccl != nil {
				nccl0 = c.nccl.Calls().AllReduce
			}
			fusedStep(t, c, k, "fused")
			for i, d := range c.devs {
				s := d.Stats()
				// k copies into the device fusion buffer and k out.
				if got := s.DtoD - before[i].DtoD; got != 2*k {
					t.Errorf("rank %d: %d device-to-device copies, want %d (fused in and out)", i, got, 2*k)
				}
				// One batch in, one out: not a call per tensor.
				if got := s.Batches - before[i].Batches; got != 2 {
					t.Errorf("rank %d: %d batched copies, want 2 (the fusion buffer in and out)", i, got)
				}
				staged := s.DtoH - before[i].DtoH - k // ToHost of the k results
				if tt.s.nccl && staged != 0 || !tt.s.nccl && staged != 1 {
					t.Errorf("rank %d: %d staging copies to the host", i, staged)
				}
			}
			if tt.s.nccl {
				if got := c.nccl.Calls().AllReduce - nccl0; got != 2 {
					t.Errorf("%d NCCL allreduces for %d tensors at np 2, want one per rank", got, k)
				}
			} else if got := c.counts[0].dataAllreduce.Load() - host0; got != 1 {
				t.Errorf("%d host allreduces for %d fused tensors, want 1", got, k)
			}
		})
	}
}

func TestGPUMixedWithCPUInOneStep(t *testing.T) {
	c := startGPUCluster(t, 2, gpuSetup{})
	c.each(t, func(r *Runtime, rank int) error {
		d := c.devs[rank]
		var ts []*tensor.Tensor
		for i := 0; i < 6; i++ {
			x := seq(float32(rank+i), 4)
			if i%2 == 1 {
				var err error
				if x, err = toDev(d, x); err != nil {
					return err
				}
			}
			ts = append(ts, x)
		}
		h, err := r.GroupedAllreduceAsyncInPlace(ts, "mixed", Sum)
		if err != nil {
			return err
		}
		if err := h.Wait(ctxT(t)); err != nil {
			return err
		}
		for i, x := range ts {
			var got []float32
			if x.Device().Kind == tensor.GPU {
				got, err = hostOf(d, x, true)
				if err != nil {
					return err
				}
			} else {
				got = x.Float32s()
			}
			if err := wantEach(got, func(j int) float32 { return float32(1 + 2*(i+j)) }); err != nil {
				return fmt.Errorf("tensor %d on %v: %w", i, x.Device(), err)
			}
		}
		return nil
	})
}

func TestGPUDeviceMismatch(t *testing.T) {
	c := startGPUCluster(t, 2, gpuSetup{})
	const want = "Mismatched ALLREDUCE CPU/GPU device selection: One rank specified device CPU, but another rank specified device GPU."
	c.each(t, func(r *Runtime, rank int) error {
		x := seq(1, 4)
		if rank == 1 {
			var err error
			if x, err = toDev(c.devs[rank], x); err != nil {
				return err
			}
			defer cuda.FreeTensor(c.devs[rank], x)
		}
		_, err := r.Allreduce(ctxT(t), x, "mismatch", Sum)
		var oe *OpError
		if !errors.As(err, &oe) || oe.Message != want {
			return fmt.Errorf("got %v, want an OpError %q", err, want)
		}
		// The runtime goes on working.
		_, err = r.Allreduce(ctxT(t), seq(1, 4), "after", Sum)
		return err
	})
}

func TestGPUAdasumRefused(t *testing.T) {
	c := startGPUCluster(t, 2, gpuSetup{})
	c.each(t, func(r *Runtime, rank int) error {
		x, err := toDev(c.devs[rank], seq(1, 4))
		if err != nil {
			return err
		}
		defer cuda.FreeTensor(c.devs[rank], x)
		err = r.AllreduceInPlace(ctxT(t), x, "ada", Adasum)
		if err == nil || !strings.Contains(err.Error(), adasumGPUText) {
			return fmt.Errorf("got %v, want %q", err, adasumGPUText)
		}
		return nil
	})
}

func TestGPUWithoutDeviceRefusedWithLoaderError(t *testing.T) {
	_, lerr := cuda.Load()
	if lerr == nil {
		t.Skip("a CUDA runtime loads here")
	}
	c := startCluster(t, 2, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		x := tensor.NewDevice(tensor.Float32, tensor.Device{Kind: tensor.GPU}, 0x1000, 4)
		for _, call := range []func() error{
			func() error { _, err := r.AllreduceAsync(x, "g", Sum); return err },
			func() error { _, err := r.AllgatherAsync(x, "g"); return err },
			func() error { _, err := r.BroadcastAsync(x, 0, "g"); return err },
			func() error { _, err := r.AlltoallAsync(x, nil, "g"); return err },
			func() error { _, err := r.ReducescatterAsync(x, "g", Sum); return err },
		} {
			err := call()
			if !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), lerr.Error()) {
				return fmt.Errorf("got %v, want the loader's error", err)
			}
		}
		// Nothing else changes: host collectives work.
		out, err := r.Allreduce(ctxT(t), fill(tensor.Float32, 3, 1), "cpu", Sum)
		if err != nil {
			return err
		}
		if first(out) != 2 {
			return fmt.Errorf("cpu allreduce %v", out.Float32s())
		}
		return nil
	})
}

// TestGPUTimelinePhases checks the activities drawn inside each GPU
// operation's span on rank 0's timeline, in order, for every path: the
// fusion buffer's copies, NCCL's collective (and INIT_NCCL at the first
// GPU operation), the staged copies to and from the host around the host
// collective, and scaling on the host.
func TestGPUTimelinePhases(t *testing.T) {
	const (
		in, out       = timeline.MemcpyInFusion, timeline.MemcpyOutFusion
		hin, hout     = timeline.MemcpyInHost, timeline.MemcpyOutHost
		scale, ncclAR = timeline.ScaleOnHost, timeline.NCCLAllreduce
	)
	for _, tt := range []struct {
		name  string
		s     gpuSetup
		fused []string // each fused step's (two: negotiated, then cached)
		first []string // before the first one's
		bcast []string
		pre   []string // a single allreduce with a prescale
	}{
		{"staged", gpuSetup{}, []string{in, hin, timeline.MPIAllreduce, hout, out}, nil,
			[]string{hin, timeline.MPIBcast, hout}, []string{hin, timeline.MPIAllreduce, hout}},
		{"nccl", gpuSetup{nccl: true}, []string{in, ncclAR, out}, []string{timeline.InitNCCL},
			[]string{timeline.NCCLBcast}, []string{scale, ncclAR}},
		{"cuda-aware", gpuSetup{cudaAware: true}, []string{in, timeline.MPIAllreduce, scale, out}, nil,
			[]string{timeline.MPIBcast}, []string{scale, timeline.MPIAllreduce}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Timeline = filepath.Join(t.TempDir(), "tl.json")
			s := tt.s
			s.cfg = &cfg
			c := startGPUCluster(t, 2, s)
			fusedStep(t, c, 3, "tl")
			fusedStep(t, c, 3, "tl") // from the cache
			c.each(t, func(r *Runtime, rank int) error {
				x, err := toDev(c.devs[rank], seq(1, 4))
				if err != nil {
					return err
				}
				defer cuda.FreeTensor(c.devs[rank], x)
				if err := r.BroadcastInPlace(ctxT(t), x, 0, "tlb"); err != nil {
					return err
				}
				return r.AllreduceInPlace(ctxT(t), x, "tlp", Sum, Prescale(2))
			})
			for _, r := range c.rts {
				r.Shutdown()
			}
			b, err := os.ReadFile(cfg.Timeline)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := timeline.Read(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct {
				row  string
				want []string
			}{
				{"allreduce.tl_1of3", slices.Concat(tt.first, tt.fused, tt.fused)},
				{"allreduce.tl_3of3", slices.Concat(tt.first, tt.fused, tt.fused)},
				{"broadcast.tlb", tt.bcast},
				{"allreduce.tlp", tt.pre},
			} {
				row := tr.Row(w.row)
				if row == nil {
					t.Errorf("no row %s", w.row)
					continue
				}
				if got := phases(row); !slices.Equal(got, w.want) {
					t.Errorf("%s: phases %v, want %v", w.row, got, w.want)
				}
			}
			if row := tr.Row("allreduce.tl_1of3"); row == nil || !slices.Contains(names(row.Spans), timeline.Queue) {
				t.Errorf("no QUEUE before the cached fused allreduce: %v", row)
			}
		})
	}
}

// phases returns the names of the activities drawn inside a row's
// operations (not its negotiations), in the order they began.
func phases(row *timeline.Row) []string {
	spans := slices.Clone(row.Spans)
	slices.SortStableFunc(spans, func(a, b timeline.Span) int {
		if a.Begin != b.Begin {
			return int(a.Begin - b.Begin)
		}
		return a.Depth - b.Depth // an operation before the activity that starts with it
	})
	var out []string
	inOp := false
	for _, s := range spans {
		switch {
		case s.Depth == 0:
			inOp = !strings.HasPrefix(s.Name, "NEGOTIATE_") && s.Name != timeline.Queue
		case s.Depth == 1 && inOp:
			out = append(out, s.Name)
		}
	}
	return out
}

func actMemcpyInFusion() string { return timeline.MemcpyInFusion }
