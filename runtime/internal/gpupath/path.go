package gpupath

import (
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

// Path is a way to perform a collective on GPU tensors.
type Path uint8

// The paths, best first.
const (
	// Staged copies the device data into a pinned host buffer, runs the
	// host communicator's collective on it and copies the result back.
	Staged Path = iota
	// NCCL runs the collective with NCCL on the device's stream.
	NCCL
	// CUDAAwareMPI hands device pointers to an MPI library that accepts
	// them.
	CUDAAwareMPI
)

var pathNames = [...]string{"host staging", "NCCL", "CUDA-aware MPI"}

// String names the path as the runtime's debug log does.
func (p Path) String() string {
	if int(p) < len(pathNames) {
		return pathNames[p]
	}
	return "unknown path"
}

// Caps is what every rank of the job has (agreed by a collective, so that
// all ranks choose alike).
type Caps struct {
	NCCL         bool // an NCCL communicator can be made
	NCCLBFloat16 bool // NCCL reduces bfloat16 (2.10 and later)
	CUDAAwareMPI bool // the host communicator accepts device pointers
}

// Op is the operation to place.
type Op struct {
	Type  wire.RequestType
	DType tensor.DType
}

// Choose returns the path for op given caps:
//
//   - NCCL takes allreduce, allgather, broadcast, alltoall and
//     reducescatter in every dtype NCCL has (bfloat16 only from 2.10; bool
//     as bytes; not int16 or uint16, which NCCL lacks);
//   - else CUDA-aware MPI takes them, except reductions (allreduce,
//     reducescatter) of float16 and bfloat16, which MPI reduces with a
//     user-defined operation that runs on the host and cannot read device
//     memory;
//   - everything else is staged through host memory, which works for
//     every operation and dtype the host path supports.
func Choose(caps Caps, op Op) Path {
	switch op.Type {
	case wire.Allreduce, wire.Allgather, wire.Broadcast, wire.Alltoall, wire.Reducescatter:
	default:
		return Staged
	}
	reduces := op.Type == wire.Allreduce || op.Type == wire.Reducescatter
	if caps.NCCL && ncclHas(caps, op.DType) {
		return NCCL
	}
	if caps.CUDAAwareMPI && !(reduces && (op.DType == tensor.Float16 || op.DType == tensor.BFloat16)) {
		return CUDAAwareMPI
	}
	return Staged
}

// ncclHas reports whether NCCL has a data type for dt (see cuda.NCCLType).
func ncclHas(caps Caps, dt tensor.DType) bool {
	switch dt {
	case tensor.Int16, tensor.Uint16:
		return false
	case tensor.BFloat16:
		return caps.NCCLBFloat16
	}
	return true
}
