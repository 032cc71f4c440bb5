package runtime

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/internal/gpuexec"
	"github.com/gohorovod/gohorovod/runtime/internal/nccl"
	"github.com/gohorovod/gohorovod/runtime/internal/timeline"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// The GPU executor (runtime/internal/gpuexec) performs responses on GPU
// tensors; this file is the runtime's side: the options, the checks at
// enqueue time and the loop's hand-over to the executor.

// adasumGPUText is delivered to Adasum requests on GPU tensors.
const adasumGPUText = gpuexec.AdasumText

// WithGPU makes the runtime use d for this rank's GPU tensors, which must
// be on GPU d.Ordinal(). Without it, the first GPU tensor makes the runtime
// load the CUDA runtime and open the tensor's device itself. The runtime
// frees the buffers it allocates on d at Shutdown but does not close d.
//
// Results of out-of-place collectives on GPU tensors (Allreduce,
// Broadcast, Allgather, Alltoall, Reducescatter) are new device memory on
// d, which the caller frees (cuda.FreeTensor).
func WithGPU(d cuda.Device) Option { return func(o *options) { o.gpu.Device = d } }

// WithoutNCCL keeps the runtime from using NCCL for GPU tensors: they go
// through a CUDA-aware MPI, or are staged through host memory.
func WithoutNCCL() Option { return func(o *options) { o.gpu.NoNCCL = true } }

// WithNCCL makes the runtime's NCCL communicators with n (for example one
// loaded with cuda.OpenNCCL from an explicit path) instead of the NCCL that
// cuda.LoadNCCL finds. It needs a *cuda.GPU device.
func WithNCCL(n *cuda.NCCL) Option { return func(o *options) { o.gpu.NCCL = nccl.FromCUDA(n) } }

// withStagePiece sets the piece size of staged allreduces (tests).
func withStagePiece(n int) Option { return func(o *options) { o.gpu.StagePiece = n } }

// withNCCL makes GPU communicators with b instead of the NCCL loaded at run
// time (tests use the fake).
func withNCCL(b nccl.Backend) Option { return func(o *options) { o.gpu.NCCL = b } }

// DeviceMemoryCommunicator is a Communicator that can also be handed tensors
// in GPU memory, as a CUDA-aware MPI can. When every rank's communicator
// says it accepts device memory (and NCCL is not available), GPU tensors go
// to it directly rather than being staged through host memory.
type DeviceMemoryCommunicator interface {
	comm.Communicator
	// AcceptsDeviceMemory reports whether device pointers may be passed.
	AcceptsDeviceMemory() bool
}

var _ gpuexec.DeviceMemoryAcceptor = DeviceMemoryCommunicator(nil)

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
	idx := t.Device().Index
	d, err := r.gpu.Device(idx)
	if err != nil {
		return fmt.Errorf("hvd: %v: %w", t, err)
	}
	if d.Ordinal() != idx {
		return fmt.Errorf("hvd: %v: %w", t, invalid("%v is on GPU %d, but this rank uses GPU %d (one GPU per rank)", t, idx, d.Ordinal()))
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

// gpuHost is the performer as the GPU executor sees it.
type gpuHost struct{ p *performer }

var _ gpuexec.Host = gpuHost{}

func (h gpuHost) Comm() comm.Communicator { return h.p.com }
func (h gpuHost) Rank() int               { return h.p.rank }
func (h gpuHost) Size() int               { return h.p.size }
func (h gpuHost) FusionThreshold() int64  { return h.p.cfg.FusionThreshold }
func (h gpuHost) Timeline() bool          { return h.p.timing }
func (h gpuHost) Log() *zerolog.Logger    { return h.p.log }

func (h gpuHost) ReduceBytes(b []byte, dt tensor.DType, op tensor.ReduceOp) error {
	return h.p.reduceBytes(b, dt, op)
}

func (h gpuHost) Activity(act string, start, end time.Time) { h.p.activity(act, start, end) }

func (h gpuHost) PlanAlltoall(splits []int, shape []int64) (gpuexec.AlltoallPlan, error) {
	p, err := h.p.planAlltoall(&entry{req: wire.Request{Shape: shape}, splits: splits})
	return gpuexec.AlltoallPlan{RecvSplits: p.recvSplits, SendCounts: p.sendCounts, RecvCounts: p.recvCounts,
		Sent: p.sent, Shape: p.shape}, err
}

// performGPU executes one response on GPU tensors through the executor
// (the controller refuses Adasum on GPU tensors itself), setting up the
// executor first when needed.
func (p *performer) performGPU(resp *wire.Response, ents []*entry) error {
	h := gpuHost{p}
	start := time.Now()
	made, err := p.gpu.Setup(h)
	if err != nil {
		return err
	}
	if made {
		p.activity(timeline.InitNCCL, start, time.Now())
	}
	ge := p.gpuEnts[:0]
	for _, e := range ents {
		ge = append(ge, gpuexec.Entry{Req: &e.req, In: e.in, Out: e.out, Splits: e.splits})
	}
	p.gpuEnts = ge
	err = p.gpu.Perform(h, resp, ge)
	for i, e := range ents {
		e.out = ge[i].Out
		if ge[i].RecvSplits != nil && e.h != nil {
			e.h.splits = ge[i].RecvSplits
		}
		ge[i] = gpuexec.Entry{} // keep no tensors alive
	}
	return err
}
