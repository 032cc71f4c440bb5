package optim

import (
	"context"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// runtimeCollectives runs the collectives on a gohorovod Runtime.
type runtimeCollectives struct {
	r          *hvd.Runtime
	rank, size int
}

// FromRuntime returns the Collectives of an initialised Runtime (hvd.Default()
// for the package-level one): in-place AllreduceAsync and BroadcastAsync,
// negotiated and fused by the runtime's background loop. It is also a
// GroupCollectives (grouped allreduce), a ReduceGroupCollectives (the
// runtime's AllreduceGroup, which the DistributedOptimizer uses for its
// gradients), a GatherCollectives (allgather) and a Ranker.
func FromRuntime(r *hvd.Runtime) (Collectives, error) {
	if !r.IsInitialized() {
		return nil, hvd.ErrNotInitialized
	}
	size, rank := r.Size(), r.Rank()
	return &runtimeCollectives{r: r, rank: rank, size: size}, nil
}

var (
	_ GroupCollectives       = (*runtimeCollectives)(nil)
	_ ReduceGroupCollectives = (*runtimeCollectives)(nil)
	_ GatherCollectives      = (*runtimeCollectives)(nil)
	_ Ranker                 = (*runtimeCollectives)(nil)
)

func (c *runtimeCollectives) Rank() int { return c.rank }

func (c *runtimeCollectives) Size() int { return c.size }

// reduceArgs returns the call options of a reduction scaled by prescale
// and postscale.
func reduceArgs(prescale, postscale float64) []hvd.CallOption {
	var opts []hvd.CallOption
	if prescale != 1 {
		opts = append(opts, hvd.Prescale(prescale))
	}
	if postscale != 1 {
		opts = append(opts, hvd.Postscale(postscale))
	}
	return opts
}

func (c *runtimeCollectives) AllreduceAsync(t *tensor.Tensor, name string, op Op, prescale, postscale float64) (Waiter, error) {
	h, err := c.r.AllreduceAsyncInPlace(t, name, op, reduceArgs(prescale, postscale)...)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (c *runtimeCollectives) GroupedAllreduceAsync(ts []*tensor.Tensor, name string, op Op, prescale, postscale float64) (Waiter, error) {
	h, err := c.r.GroupedAllreduceAsyncInPlace(ts, name, op, reduceArgs(prescale, postscale)...)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (c *runtimeCollectives) Allgather(ctx context.Context, t *tensor.Tensor, name string) (*tensor.Tensor, error) {
	return c.r.Allgather(ctx, t, name)
}

func (c *runtimeCollectives) BroadcastAsync(t *tensor.Tensor, root int, name string) (Waiter, error) {
	h, err := c.r.BroadcastAsyncInPlace(t, root, name)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (c *runtimeCollectives) NewReduceGroup(ts []*tensor.Tensor, names []string, op Op, prescale, postscale float64) (ReduceGroup, error) {
	g, err := c.r.NewAllreduceGroup(ts, names, op, reduceArgs(prescale, postscale)...)
	if err != nil {
		return nil, err
	}
	return runtimeGroup{c.r, g}, nil
}

// runtimeGroup is a ReduceGroup on the runtime's AllreduceGroup.
type runtimeGroup struct {
	r *hvd.Runtime
	g *hvd.AllreduceGroup
}

func (g runtimeGroup) Start() (Waiter, error) {
	h, err := g.g.Start()
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Close closes the group (after the runtime stopped too: its failed step
// is out of flight).
func (g runtimeGroup) Close() error { return g.g.Close() }
