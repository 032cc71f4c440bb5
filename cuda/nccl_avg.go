package cuda

import (
	"fmt"

	"github.com/gohorovod/gohorovod/tensor"
)

// ncclAvg is ncclRedOp_t's ncclAvg, NCCL 2.10 and later: the sum divided by
// the number of ranks (integer types truncate, as Horovod's average does).
const (
	ncclAvg               = 4
	ncclMinVersionAverage = 21000
)

// HasAverage reports whether this NCCL has the ncclAvg reduction (2.10+).
func (n *NCCL) HasAverage() bool { return ncclCode(n.version) >= ncclMinVersionAverage }

// HasBFloat16 reports whether this NCCL has the bfloat16 type (2.10+).
func (n *NCCL) HasBFloat16() bool { return ncclCode(n.version) >= ncclMinVersionBFloat16 }

// AllReduceAverage is AllReduce with NCCL's average (ncclAvg): the sum
// across ranks divided by their number, computed on the device.
func (c *Comm) AllReduceAverage(send, recv uintptr, count int, dt tensor.DType, s *Stream) error {
	if err := c.check("ncclAllReduce", count, send, recv); err != nil {
		return err
	}
	if !c.n.HasAverage() {
		return fmt.Errorf("cuda: NCCL %v has no average reduction (2.10 or later is needed)", c.n.version)
	}
	if dt == tensor.Bool {
		return fmt.Errorf("cuda: no average of %v", dt)
	}
	t, err := c.dtype(dt)
	if err != nil {
		return err
	}
	return ncclErr(c.n.api, c.h, c.n.api.allReduce(send, recv, count, t, ncclAvg, c.h, s.Handle()),
		"ncclAllReduce(%d %v, average) on rank %d", count, dt, c.rank)
}
