package nccl

import (
	"fmt"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// FromCUDA returns the Backend of a loaded NCCL. Its communicators queue
// their work on the stream of the *cuda.GPU they are made on, the stream
// the GPU's copies use.
func FromCUDA(n *cuda.NCCL) Backend { return cudaBackend{n} }

type cudaBackend struct{ n *cuda.NCCL }

func (b cudaBackend) Average() bool                    { return b.n.HasAverage() }
func (b cudaBackend) BFloat16() bool                   { return b.n.HasBFloat16() }
func (b cudaBackend) UniqueID() (cuda.UniqueID, error) { return b.n.UniqueID() }

func (b cudaBackend) NewComm(dev cuda.Device, nranks, rank int, id cuda.UniqueID) (Comm, error) {
	g, ok := dev.(*cuda.GPU)
	if !ok {
		return nil, fmt.Errorf("nccl: NCCL needs a CUDA device, not %T", dev)
	}
	c, err := b.n.NewComm(g.Ordinal(), nranks, rank, id)
	if err != nil {
		return nil, err
	}
	return &cudaComm{n: b.n, c: c, s: g.Stream()}, nil
}

type cudaComm struct {
	n *cuda.NCCL
	c *cuda.Comm
	s *cuda.Stream
}

func (c *cudaComm) AllReduce(buf uintptr, count int, dt tensor.DType, op tensor.ReduceOp, average bool) error {
	if count == 0 {
		return nil
	}
	if average {
		return c.c.AllReduceAverage(buf, buf, count, dt, c.s)
	}
	return c.c.AllReduce(buf, buf, count, dt, op, c.s)
}

// AllGatherV uses ncclAllGather when every rank sends as much, else one
// ncclBroadcast per rank into its block, launched as one group (as
// Horovod's NCCL allgatherv does).
func (c *cudaComm) AllGatherV(send, recv uintptr, counts []int, dt tensor.DType) error {
	if equal(counts) {
		if counts[0] == 0 {
			return nil
		}
		return c.c.AllGather(send, recv, counts[0], dt, c.s)
	}
	return c.perBlock(counts, dt, func(r int, off uintptr, n int, mine bool) error {
		var src uintptr
		if mine {
			src = send
		}
		return c.c.Broadcast(src, recv+off, n, dt, r, c.s)
	})
}

// perBlock calls do, in one NCCL group, for each rank r's non-empty block
// of counts: its byte offset, its element count, and whether r is this
// rank.
func (c *cudaComm) perBlock(counts []int, dt tensor.DType, do func(r int, off uintptr, n int, mine bool) error) error {
	off := comm.Offsets(counts)
	es := uintptr(dt.Size())
	return c.n.Group(func() error {
		for r, n := range counts {
			if n == 0 {
				continue
			}
			if err := do(r, uintptr(off[r])*es, n, r == c.c.Rank()); err != nil {
				return err
			}
		}
		return nil
	})
}

func (c *cudaComm) Broadcast(buf uintptr, count int, dt tensor.DType, root int) error {
	if count == 0 {
		return nil
	}
	return c.c.Broadcast(buf, buf, count, dt, root, c.s)
}

// ReduceScatterV uses ncclReduceScatter when the blocks are equal, else one
// ncclReduce per block to the rank that keeps it, launched as one group.
func (c *cudaComm) ReduceScatterV(send, recv uintptr, counts []int, dt tensor.DType, op tensor.ReduceOp) error {
	if equal(counts) {
		if counts[0] == 0 {
			return nil
		}
		return c.c.ReduceScatter(send, recv, counts[0], dt, op, c.s)
	}
	return c.perBlock(counts, dt, func(r int, off uintptr, n int, mine bool) error {
		var dst uintptr
		if mine {
			dst = recv
		}
		return c.c.Reduce(send+off, dst, n, dt, op, r, c.s)
	})
}

func (c *cudaComm) AllToAllV(send uintptr, sendCounts []int, recv uintptr, recvCounts []int, dt tensor.DType) error {
	return c.c.AllToAll(send, sendCounts, recv, recvCounts, dt, c.s)
}

func (c *cudaComm) Err() error   { return c.c.AsyncError() }
func (c *cudaComm) Close() error { return c.c.Destroy() }
