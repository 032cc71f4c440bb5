package optim

import (
	"fmt"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// runtimeCollectives runs the collectives on a gohorovod Runtime.
type runtimeCollectives struct {
	r    *hvd.Runtime
	size int
}

// FromRuntime returns the Collectives of an initialised Runtime (hvd.Default()
// for the package-level one): in-place AllreduceAsync and BroadcastAsync,
// negotiated and fused by the runtime's background loop.
func FromRuntime(r *hvd.Runtime) (Collectives, error) {
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	return &runtimeCollectives{r: r, size: size}, nil
}

func (c *runtimeCollectives) Size() int { return c.size }

func (c *runtimeCollectives) AllreduceAsync(t *tensor.Tensor, name string, op Op, prescale, postscale float64) (Waiter, error) {
	var hop hvd.ReduceOp
	switch op {
	case Average:
		hop = hvd.Average
	case Sum:
		hop = hvd.Sum
	default:
		return nil, fmt.Errorf("optim: unsupported op %v", op)
	}
	var opts []hvd.CallOption
	if prescale != 1 {
		opts = append(opts, hvd.Prescale(prescale))
	}
	if postscale != 1 {
		opts = append(opts, hvd.Postscale(postscale))
	}
	h, err := c.r.AllreduceAsyncInPlace(t, name, hop, opts...)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (c *runtimeCollectives) BroadcastAsync(t *tensor.Tensor, root int, name string) (Waiter, error) {
	h, err := c.r.BroadcastAsyncInPlace(t, root, name)
	if err != nil {
		return nil, err
	}
	return h, nil
}
