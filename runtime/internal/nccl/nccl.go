package nccl

import (
	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/tensor"
)

// Backend makes NCCL communicators.
type Backend interface {
	// Average reports whether AllReduce can average on the device.
	Average() bool
	// BFloat16 reports whether bfloat16 is supported.
	BFloat16() bool
	// UniqueID draws a new communicator id; one rank calls it and the
	// others receive the bytes.
	UniqueID() (cuda.UniqueID, error)
	// NewComm joins rank (of nranks) to the communicator id names, on
	// dev; it returns once every rank has joined.
	NewComm(dev cuda.Device, nranks, rank int, id cuda.UniqueID) (Comm, error)
}

// Comm is one rank's communicator. Its calls are queued on the device's
// stream, in order with the device's copies: their results are in place
// once the device has been synchronised. Counts are in elements; every
// rank passes the same counts slices.
type Comm interface {
	// AllReduce reduces count elements at buf across ranks, in place,
	// with op, or averages them when average is true.
	AllReduce(buf uintptr, count int, dt tensor.DType, op tensor.ReduceOp, average bool) error
	// AllGatherV concatenates counts[r] elements from each rank r, in
	// rank order, into recv.
	AllGatherV(send, recv uintptr, counts []int, dt tensor.DType) error
	// Broadcast copies count elements at root's buf into every rank's buf.
	Broadcast(buf uintptr, count int, dt tensor.DType, root int) error
	// ReduceScatterV reduces send (the sum of counts elements) across
	// ranks with op and leaves block Rank of the result in recv.
	ReduceScatterV(send, recv uintptr, counts []int, dt tensor.DType, op tensor.ReduceOp) error
	// AllToAllV sends block r of send (sendCounts[r] elements) to rank r
	// and receives recvCounts[r] elements from rank r into block r of recv.
	AllToAllV(send uintptr, sendCounts []int, recv uintptr, recvCounts []int, dt tensor.DType) error
	// Err reports an error a queued collective hit after it was queued.
	Err() error
	// Close destroys the communicator.
	Close() error
}

func equal(counts []int) bool {
	for _, c := range counts {
		if c != counts[0] {
			return false
		}
	}
	return true
}
