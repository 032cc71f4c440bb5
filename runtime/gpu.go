package runtime

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/gpupath"
	"github.com/gohorovod/gohorovod/runtime/internal/nccl"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// Timeline activity names of the GPU path (Horovod's).
const (
	actNCCLAllreduce  = "NCCL_ALLREDUCE"
	actNCCLAllgather  = "NCCL_ALLGATHER"
	actNCCLBcast      = "NCCL_BCAST"
	actNCCLAlltoall   = "NCCL_ALLTOALL"
	actNCCLReduceScat = "NCCL_REDUCESCATTER"
	actMemcpyInHost   = "MEMCPY_IN_HOST_BUFFER"
	actMemcpyOutHost  = "MEMCPY_OUT_HOST_BUFFER"
	actScaleOnHost    = "SCALE_ON_HOST"
)

type gpuOptions struct {
	dev    cuda.Device
	noNCCL bool
	nccl   nccl.Backend // a fake, for tests
}

// WithGPU makes the runtime use d for this rank's GPU tensors, which must
// be on GPU d.Ordinal(). Without it, the first GPU tensor makes the runtime
// load the CUDA runtime and open the tensor's device itself. The runtime
// frees the buffers it allocates on d at Shutdown but does not close d.
//
// Results of out-of-place collectives on GPU tensors (Allreduce,
// Broadcast, Allgather, Alltoall, Reducescatter) are new device memory on
// d, which the caller frees (cuda.FreeTensor).
func WithGPU(d cuda.Device) Option { return func(o *options) { o.gpu.dev = d } }

// WithoutNCCL keeps the runtime from using NCCL for GPU tensors: they go
// through a CUDA-aware MPI, or are staged through host memory.
func WithoutNCCL() Option { return func(o *options) { o.gpu.noNCCL = true } }

// WithNCCL makes the runtime's NCCL communicators with n (for example one
// loaded with cuda.OpenNCCL from an explicit path) instead of the NCCL that
// cuda.LoadNCCL finds. It needs a *cuda.GPU device.
func WithNCCL(n *cuda.NCCL) Option { return func(o *options) { o.gpu.nccl = nccl.FromCUDA(n) } }

// withNCCL makes GPU communicators with b instead of the NCCL loaded at run
// time (tests use the fake).
func withNCCL(b nccl.Backend) Option { return func(o *options) { o.gpu.nccl = b } }

// DeviceMemoryCommunicator is a Communicator that can also be handed tensors
// in GPU memory, as a CUDA-aware MPI can. When every rank's communicator
// says it accepts device memory (and NCCL is not available), GPU tensors go
// to it directly rather than being staged through host memory.
type DeviceMemoryCommunicator interface {
	comm.Communicator
	// AcceptsDeviceMemory reports whether device pointers may be passed.
	AcceptsDeviceMemory() bool
}

// gpuState is a rank's GPU support: the device (injected at Init or opened
// at the first GPU tensor, under mu) and, owned by the background loop, the
// agreed capabilities, the NCCL communicator and the device fusion and
// pinned host staging buffers.
type gpuState struct {
	opts gpuOptions
	log  zerolog.Logger

	mu    sync.Mutex
	dev   cuda.Device
	owned bool // opened by the runtime, closed at shutdown

	// Loop-owned.
	ready     bool
	caps      gpupath.Caps
	backend   nccl.Backend
	nc        nccl.Comm
	fusion    uintptr // device fusion buffer
	fusionCap int
	host      []byte // pinned staging buffer (Go memory without a device)
	fresh     []uintptr
}

func newGPUState(o gpuOptions, log zerolog.Logger) *gpuState {
	return &gpuState{opts: o, log: log, dev: o.dev}
}

// device returns the rank's device, or nil when it has none yet.
func (g *gpuState) device() cuda.Device {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dev
}

// deviceFor returns the device for a GPU tensor, opening it (through the
// CUDA runtime loaded at run time) the first time.
func (g *gpuState) deviceFor(t *tensor.Tensor) (cuda.Device, error) {
	idx := t.Device().Index
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dev == nil {
		rt, err := cuda.Load()
		if err != nil {
			return nil, err
		}
		d, err := rt.OpenDevice(idx)
		if err != nil {
			return nil, err
		}
		g.dev, g.owned = d, true
	}
	if g.dev.Ordinal() != idx {
		return nil, invalid("%v is on GPU %d, but this rank uses GPU %d (one GPU per rank)", t, idx, g.dev.Ordinal())
	}
	return g.dev, nil
}

// close releases what the runtime allocated: the NCCL communicator, the
// fusion and staging buffers, and the device if the runtime opened it.
func (g *gpuState) close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	if g.nc != nil {
		errs = append(errs, g.nc.Close())
		g.nc = nil
	}
	if g.dev != nil {
		if g.fusion != 0 {
			errs = append(errs, g.dev.Free(g.fusion))
			g.fusion, g.fusionCap = 0, 0
		}
		if g.host != nil {
			errs = append(errs, g.dev.FreeHost(g.host))
			g.host = nil
		}
		if g.owned {
			errs = append(errs, g.dev.Close())
			g.dev, g.owned = nil, false
		}
	}
	return errors.Join(errs...)
}

// checkTensor validates a collective's tensor at enqueue time: GPU tensors
// need a device, which is opened here the first time.
func (r *Runtime) checkTensor(t *tensor.Tensor) error {
	if t == nil {
		return invalid("nil tensor")
	}
	if t.Device().Kind == tensor.CPU {
		return nil
	}
	if t.Device().Kind != tensor.GPU {
		return invalid("tensor on %v: unknown device kind", t.Device())
	}
	if _, err := r.gpu.deviceFor(t); err != nil {
		return fmt.Errorf("hvd: %v: %w", t, err)
	}
	return nil
}

// newOutput returns a host tensor of shape for the result of a collective
// on t, or nil when t is on a GPU: the loop allocates device results when
// it performs the operation.
func newOutput(t *tensor.Tensor, shape []int) *tensor.Tensor {
	if t.Device().Kind != tensor.CPU {
		return nil
	}
	return tensor.New(t.DType(), shape...)
}

// onGPU reports whether resp concerns GPU tensors.
func onGPU(resp *wire.Response, rank int) bool {
	return rank < len(resp.Devices) && resp.Devices[rank] != wire.CPU
}

// gpuSetup runs once, at the first GPU response, on every rank (all ranks
// perform the same responses in the same order): the ranks agree on what
// all of them have, and, when all have NCCL, rank 0 draws the NCCL id, the
// host communicator broadcasts it and every rank joins the communicator.
func (l *loop) gpuSetup(dev cuda.Device) error {
	g := l.r.gpu
	if g.ready {
		return nil
	}
	g.ready = true
	start := time.Now()
	why := ""
	backend := g.opts.nccl
	switch {
	case dev == nil:
		why = "this rank has no GPU"
	case g.opts.noNCCL:
		backend, why = nil, "disabled by WithoutNCCL"
	case backend == nil:
		if _, ok := dev.(*cuda.GPU); !ok {
			why = fmt.Sprintf("the device is a %T, not a CUDA GPU", dev)
			break
		}
		n, err := cuda.LoadNCCL()
		if err != nil {
			why = err.Error()
			break
		}
		backend = nccl.FromCUDA(n)
	}
	var local [3]int64
	if dev != nil && backend != nil {
		local[0] = 1
		if backend.BFloat16() {
			local[1] = 1
		}
	}
	if dc, ok := l.com.(DeviceMemoryCommunicator); ok && dev != nil && dc.AcceptsDeviceMemory() {
		local[2] = 1
	}
	agreed := tensor.FromInt64(local[:])
	if err := l.com.Allreduce(agreed, tensor.Min); err != nil {
		return fmt.Errorf("agreeing on GPU support: %w", err)
	}
	g.caps = gpupath.Caps{NCCL: local[0] == 1, NCCLBFloat16: local[1] == 1, CUDAAwareMPI: local[2] == 1}
	if g.caps.NCCL {
		var idb [1 + len(cuda.UniqueID{})]byte // byte 0: rank 0 has an id
		if l.rank == 0 {
			if id, err := backend.UniqueID(); err != nil {
				l.log.Warn().Err(err).Msg("cannot create the NCCL unique id; GPU tensors will not use NCCL")
			} else {
				idb[0] = 1
				copy(idb[1:], id[:])
			}
		}
		bt, err := tensor.FromBytes(tensor.Uint8, idb[:])
		if err != nil {
			return err
		}
		if err := l.com.Bcast(bt, 0); err != nil {
			return fmt.Errorf("broadcasting the NCCL unique id: %w", err)
		}
		if idb[0] == 0 {
			g.caps.NCCL, g.caps.NCCLBFloat16 = false, false
			why = "rank 0 could not create the NCCL unique id"
		} else {
			var id cuda.UniqueID
			copy(id[:], idb[1:])
			nc, err := backend.NewComm(dev, l.size, l.rank, id)
			if err != nil {
				return fmt.Errorf("creating the NCCL communicator: %w", err)
			}
			g.nc, g.backend = nc, backend
		}
	} else if why == "" && local[0] == 1 {
		why = "another rank cannot use NCCL"
	}
	ev := l.log.Debug().Bool("nccl", g.caps.NCCL).Bool("cuda_aware_mpi", g.caps.CUDAAwareMPI).Dur("took", time.Since(start))
	if !g.caps.NCCL {
		ev = ev.Str("no_nccl", why)
	}
	ev.Msg("GPU support agreed")
	return nil
}

// fusionBuffer returns the device fusion buffer with room for n bytes.
func (g *gpuState) fusionBuffer(dev cuda.Device, n int, threshold int64) (uintptr, error) {
	if g.fusionCap < n {
		size := max(n, min(2*g.fusionCap, int(threshold)))
		if g.fusion != 0 {
			if err := dev.Free(g.fusion); err != nil {
				return 0, err
			}
			g.fusion, g.fusionCap = 0, 0
		}
		p, err := dev.Alloc(size)
		if err != nil {
			return 0, err
		}
		g.fusion, g.fusionCap = p, size
	}
	return g.fusion, nil
}

// hostBuffer returns the staging buffer with room for n bytes: pinned
// memory of the device, or Go memory on a rank without one.
func (g *gpuState) hostBuffer(dev cuda.Device, n int) ([]byte, error) {
	if len(g.host) < n {
		size := max(n, 2*len(g.host))
		if dev == nil {
			g.host = make([]byte, size)
			return g.host[:n], nil
		}
		if g.host != nil {
			if err := dev.FreeHost(g.host); err != nil {
				return nil, err
			}
			g.host = nil
		}
		b, err := dev.AllocHost(size)
		if err != nil {
			return nil, err
		}
		g.host = b
	}
	return g.host[:n], nil
}

// alloc returns new device memory for a result of shape, remembered until
// the operation completes (and freed if it fails).
func (g *gpuState) alloc(dev cuda.Device, dt tensor.DType, shape []int) (*tensor.Tensor, error) {
	n := tensor.Shape(shape).NumElements() * dt.Size()
	p, err := dev.Alloc(n)
	if err != nil {
		return nil, err
	}
	if p != 0 {
		g.fresh = append(g.fresh, p)
	}
	return tensor.NewDevice(dt, tensor.Device{Kind: tensor.GPU, Index: dev.Ordinal()}, p, shape...), nil
}

// settle ends an operation: on success the fresh results belong to the
// caller; on failure they are freed.
func (g *gpuState) settle(dev cuda.Device, failed bool) {
	if failed && dev != nil {
		for _, p := range g.fresh {
			if err := dev.Free(p); err != nil {
				g.log.Error().Err(err).Msg("freeing the result of a failed GPU collective")
			}
		}
	}
	g.fresh = g.fresh[:0]
}
