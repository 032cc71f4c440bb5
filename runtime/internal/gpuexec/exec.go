package gpuexec

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

// AdasumText is delivered to Adasum requests on GPU tensors.
const AdasumText = "Adasum on GPU tensors is not supported by this runtime; reduce a host copy"

// Options are the runtime's GPU options (WithGPU, WithoutNCCL, WithNCCL).
type Options struct {
	Device cuda.Device  // the rank's device; nil: opened at the first GPU tensor
	NoNCCL bool         // never use NCCL
	NCCL   nccl.Backend // NCCL to use instead of the one loaded at run time
	// StagePiece is the piece size of a staged allreduce (tests); 0:
	// StagePieceBytes.
	StagePiece int
}

// StagePieceBytes is how much of a staged allreduce is copied to the host,
// reduced over the host communicator and copied back at a time, so that
// the copies of the other pieces overlap the reduction. It is the host
// path's transport chunk (chosen by measurement there: see the runtime's
// defaultChunkBytes), so that each piece is one transport call; the
// overlap itself has not been measured on a GPU yet.
const StagePieceBytes = 4 << 20

// stagePiece is the piece size for elements of dt: a whole number of
// elements.
func (x *Executor) stagePiece(dt tensor.DType) int {
	p := x.opts.StagePiece
	if p <= 0 {
		p = StagePieceBytes
	}
	return max(p-p%dt.Size(), dt.Size())
}

// Host is what the executor needs from the runtime's loop of the process
// set it serves.
type Host interface {
	// Comm is the set's host communicator.
	Comm() comm.Communicator
	// Rank and Size are within the set.
	Rank() int
	Size() int
	// FusionThreshold bounds the device fusion buffer's growth.
	FusionThreshold() int64
	// ReduceBytes allreduces b (elements of dt) in place over the host
	// communicator, chunked and hierarchical as the runtime is set up.
	ReduceBytes(b []byte, dt tensor.DType, op tensor.ReduceOp) error
	// PlanAlltoall exchanges the ranks' splits for an alltoall.
	PlanAlltoall(splits []int, shape []int64) (AlltoallPlan, error)
	// Timeline reports whether a timeline is being written: phases are
	// then ended by a device synchronisation, so that they cover the
	// device's work.
	Timeline() bool
	// Activity draws one activity of the current operation's tensors.
	Activity(act string, start, end time.Time)
	// Log is the set's logger.
	Log() *zerolog.Logger
}

// AlltoallPlan is what every rank learns before an alltoall moves data:
// the rows it receives from each rank, the element counts to send and
// receive, the rows it sends and the shape of its output.
type AlltoallPlan struct {
	RecvSplits, SendCounts, RecvCounts []int
	Sent                               int
	Shape                              []int
}

// Entry is one tensor of a response. Out is nil when the executor is to
// allocate the result on the device (it sets it); RecvSplits is set by an
// alltoall.
type Entry struct {
	Req        *wire.Request
	In, Out    *tensor.Tensor
	Splits     []int
	RecvSplits []int
}

// DeviceMemoryAcceptor is a host communicator that accepts device
// pointers (a CUDA-aware MPI).
type DeviceMemoryAcceptor interface {
	AcceptsDeviceMemory() bool
}

// Executor is a rank's GPU support for one process set: the device
// (injected at Init or opened at the first GPU tensor, under mu) and,
// owned by the loop, the agreed capabilities, the NCCL communicator and the
// device fusion and pinned host staging buffers.
type Executor struct {
	opts Options
	log  zerolog.Logger

	mu     sync.Mutex
	dev    cuda.Device
	owned  bool      // opened by the executor, closed by Close
	parent *Executor // ForSet: the global set's, whose device this one uses

	// Loop-owned.
	ready     bool
	caps      gpupath.Caps
	backend   nccl.Backend
	nc        nccl.Comm
	fusion    uintptr // device fusion buffer
	fusionCap int
	host      []byte // pinned staging buffer (Go memory without a device)
	fresh     []uintptr
	copies    copyBatch // the fusion buffer's copies, reused
}

// copyBatch collects a fusion buffer's device-to-device copies, to be
// queued with one Device.CopyDtoDBatch (the cuda package's copy kernel, or
// one cudaMemcpyBatchAsync from CUDA 12.8): a cudaMemcpyAsync per tensor
// costs many times the copy's own time for a model's many small gradients
// (docs/BENCHMARKS.md).
type copyBatch struct {
	dsts, srcs []uintptr
	sizes      []int
}

// batch returns the executor's copy batch, emptied.
func (x *Executor) batch() *copyBatch {
	b := &x.copies
	b.dsts, b.srcs, b.sizes = b.dsts[:0], b.srcs[:0], b.sizes[:0]
	return b
}

func (b *copyBatch) add(dst, src uintptr, n int) {
	b.dsts, b.srcs, b.sizes = append(b.dsts, dst), append(b.srcs, src), append(b.sizes, n)
}

func (b *copyBatch) run(dev cuda.Device) error {
	if len(b.dsts) == 0 {
		return nil
	}
	return dev.CopyDtoDBatch(b.dsts, b.srcs, b.sizes)
}

// New returns an executor with options o.
func New(o Options, log zerolog.Logger) *Executor {
	return &Executor{opts: o, log: log, dev: o.Device}
}

// ForSet returns the executor of another process set this rank is in:
// the same options and the same device, x's (also one x opens later: the
// runtime opens the device at the first GPU tensor, through the global
// set's executor), with its own capabilities, NCCL communicator and
// buffers. Close it before x.
func (x *Executor) ForSet(log zerolog.Logger) *Executor {
	return &Executor{opts: x.opts, log: log, dev: x.opts.Device, parent: x}
}

// device returns the rank's device, or nil when it has none yet.
func (x *Executor) device() cuda.Device {
	x.mu.Lock()
	d := x.dev
	x.mu.Unlock()
	if d == nil && x.parent != nil {
		return x.parent.device()
	}
	return d
}

// Device returns the rank's device, opening device idx through the CUDA
// runtime loaded at run time when there is none yet. The caller checks
// that the device's ordinal is the one it asked for (one GPU per rank).
func (x *Executor) Device(idx int) (cuda.Device, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.dev == nil {
		rt, err := cuda.Load()
		if err != nil {
			return nil, err
		}
		d, err := rt.OpenDevice(idx)
		if err != nil {
			return nil, err
		}
		x.dev, x.owned = d, true
	}
	return x.dev, nil
}

// Close releases what the executor allocated: the NCCL communicator, the
// fusion and staging buffers, and the device if it opened it.
func (x *Executor) Close() error {
	dev := x.device()
	x.mu.Lock()
	defer x.mu.Unlock()
	var errs []error
	if x.nc != nil {
		errs = append(errs, x.nc.Close())
		x.nc = nil
	}
	if dev != nil {
		if x.fusion != 0 {
			errs = append(errs, dev.Free(x.fusion))
			x.fusion, x.fusionCap = 0, 0
		}
		if x.host != nil {
			errs = append(errs, dev.FreeHost(x.host))
			x.host = nil
		}
		if x.owned {
			errs = append(errs, dev.Close())
			x.dev, x.owned = nil, false
		}
	}
	return errors.Join(errs...)
}

// setup runs once, at the first GPU response, on every rank (all ranks
// perform the same responses in the same order): the ranks agree on what
// all of them have, and, when all have NCCL, rank 0 draws the NCCL id, the
// host communicator broadcasts it and every rank joins the communicator.
func (x *Executor) setup(h Host, dev cuda.Device) error {
	if x.ready {
		return nil
	}
	x.ready = true
	com, rank, size, log := h.Comm(), h.Rank(), h.Size(), h.Log()
	start := time.Now()
	why := ""
	backend := x.opts.NCCL
	switch {
	case dev == nil:
		why = "this rank has no GPU"
	case x.opts.NoNCCL:
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
	if dc, ok := com.(DeviceMemoryAcceptor); ok && dev != nil && dc.AcceptsDeviceMemory() {
		local[2] = 1
	}
	agreed := tensor.FromInt64(local[:])
	if err := com.Allreduce(agreed, tensor.Min); err != nil {
		return fmt.Errorf("agreeing on GPU support: %w", err)
	}
	x.caps = gpupath.Caps{NCCL: local[0] == 1, NCCLBFloat16: local[1] == 1, CUDAAwareMPI: local[2] == 1}
	if x.caps.NCCL {
		var idb [1 + len(cuda.UniqueID{})]byte // byte 0: rank 0 has an id
		if rank == 0 {
			if id, err := backend.UniqueID(); err != nil {
				log.Warn().Err(err).Msg("cannot create the NCCL unique id; GPU tensors will not use NCCL")
			} else {
				idb[0] = 1
				copy(idb[1:], id[:])
			}
		}
		bt, err := tensor.FromBytes(tensor.Uint8, idb[:])
		if err != nil {
			return err
		}
		if err := com.Bcast(bt, 0); err != nil {
			return fmt.Errorf("broadcasting the NCCL unique id: %w", err)
		}
		if idb[0] == 0 {
			x.caps.NCCL, x.caps.NCCLBFloat16 = false, false
			why = "rank 0 could not create the NCCL unique id"
		} else {
			var id cuda.UniqueID
			copy(id[:], idb[1:])
			nc, err := backend.NewComm(dev, size, rank, id)
			if err != nil {
				return fmt.Errorf("creating the NCCL communicator: %w", err)
			}
			x.nc, x.backend = nc, backend
		}
	} else if why == "" && local[0] == 1 {
		why = "another rank cannot use NCCL"
	}
	ev := log.Debug().Bool("nccl", x.caps.NCCL).Bool("cuda_aware_mpi", x.caps.CUDAAwareMPI).Dur("took", time.Since(start))
	if !x.caps.NCCL {
		ev = ev.Str("no_nccl", why)
	}
	ev.Msg("GPU support agreed")
	return nil
}

// fusionBuffer returns the device fusion buffer with room for n bytes.
func (x *Executor) fusionBuffer(dev cuda.Device, n int, threshold int64) (uintptr, error) {
	if x.fusionCap < n {
		size := max(n, min(2*x.fusionCap, int(threshold)))
		if x.fusion != 0 {
			if err := dev.Free(x.fusion); err != nil {
				return 0, err
			}
			x.fusion, x.fusionCap = 0, 0
		}
		p, err := dev.Alloc(size)
		if err != nil {
			return 0, err
		}
		x.fusion, x.fusionCap = p, size
	}
	return x.fusion, nil
}

// hostBuffer returns the staging buffer with room for n bytes: pinned
// memory of the device, or Go memory on a rank without one.
func (x *Executor) hostBuffer(dev cuda.Device, n int) ([]byte, error) {
	if len(x.host) < n {
		size := max(n, 2*len(x.host))
		if dev == nil {
			x.host = make([]byte, size)
			return x.host[:n], nil
		}
		if x.host != nil {
			if err := dev.FreeHost(x.host); err != nil {
				return nil, err
			}
			x.host = nil
		}
		b, err := dev.AllocHost(size)
		if err != nil {
			return nil, err
		}
		x.host = b
	}
	return x.host[:n], nil
}

// alloc returns new device memory for a result of shape, remembered until
// the operation completes (and freed if it fails).
func (x *Executor) alloc(dev cuda.Device, dt tensor.DType, shape []int) (*tensor.Tensor, error) {
	n := tensor.Shape(shape).NumElements() * dt.Size()
	p, err := dev.Alloc(n)
	if err != nil {
		return nil, err
	}
	if p != 0 {
		x.fresh = append(x.fresh, p)
	}
	return tensor.NewDevice(dt, tensor.Device{Kind: tensor.GPU, Index: dev.Ordinal()}, p, shape...), nil
}

// settle ends an operation: on success the fresh results belong to the
// caller; on failure they are freed.
func (x *Executor) settle(dev cuda.Device, failed bool) {
	if failed && dev != nil {
		for _, p := range x.fresh {
			if err := dev.Free(p); err != nil {
				x.log.Error().Err(err).Msg("freeing the result of a failed GPU collective")
			}
		}
	}
	x.fresh = x.fresh[:0]
}
