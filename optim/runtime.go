package optim

import (
	"context"
	"fmt"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// runtimeCollectives runs the collectives on a gohorovod Runtime.
type runtimeCollectives struct {
	r          *hvd.Runtime
	rank, size int
	ps         *hvd.ProcessSet  // FromProcessSet's set, or nil for the global set
	set        []hvd.CallOption // InProcessSet(ps), or none
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

// FromProcessSet is FromRuntime within the process set ps: every
// collective runs among ps's ranks (hvd.InProcessSet), Rank and Size are
// this process's rank in ps and ps's size, and a broadcast's root is a rank
// within ps (0: ps's lowest global rank). A DistributedOptimizer over it
// averages the gradients of ps's ranks only, as Horovod's
// DistributedOptimizer(process_set=ps) does, and BroadcastObject and
// AllgatherObject over it stay within ps. It fails with
// hvd.ErrForeignProcessSet on a process outside ps.
func FromProcessSet(r *hvd.Runtime, ps *hvd.ProcessSet) (Collectives, error) {
	if !r.IsInitialized() {
		return nil, hvd.ErrNotInitialized
	}
	if ps == nil {
		return FromRuntime(r)
	}
	if !ps.Included() {
		return nil, &hvd.ProcessSetError{Op: "FromProcessSet", Code: hvd.ProcessSetErrorForeign,
			Message: fmt.Sprintf("Rank %d is not a member of the provided process set.", r.Rank())}
	}
	return &runtimeCollectives{r: r, rank: ps.Rank(), size: ps.Size(), ps: ps, set: []hvd.CallOption{hvd.InProcessSet(ps)}}, nil
}

// root translates a root within the set into the global rank the runtime
// takes.
func (c *runtimeCollectives) root(r int) int {
	if c.ps == nil {
		return r
	}
	if rs := c.ps.Ranks(); r >= 0 && r < len(rs) {
		return rs[r]
	}
	return -1
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
func (c *runtimeCollectives) reduceArgs(prescale, postscale float64) []hvd.CallOption {
	opts := append([]hvd.CallOption(nil), c.set...)
	if prescale != 1 {
		opts = append(opts, hvd.Prescale(prescale))
	}
	if postscale != 1 {
		opts = append(opts, hvd.Postscale(postscale))
	}
	return opts
}

func (c *runtimeCollectives) AllreduceAsync(t *tensor.Tensor, name string, op tensor.ReduceOp, prescale, postscale float64) (Waiter, error) {
	h, err := c.r.AllreduceAsyncInPlace(t, name, op, c.reduceArgs(prescale, postscale)...)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (c *runtimeCollectives) GroupedAllreduceAsync(ts []*tensor.Tensor, name string, op tensor.ReduceOp, prescale, postscale float64) (Waiter, error) {
	h, err := c.r.GroupedAllreduceAsyncInPlace(ts, name, op, c.reduceArgs(prescale, postscale)...)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (c *runtimeCollectives) Allgather(ctx context.Context, t *tensor.Tensor, name string) (*tensor.Tensor, error) {
	return c.r.Allgather(ctx, t, name, c.set...)
}

func (c *runtimeCollectives) BroadcastAsync(t *tensor.Tensor, root int, name string) (Waiter, error) {
	h, err := c.r.BroadcastAsyncInPlace(t, c.root(root), name, c.set...)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (c *runtimeCollectives) NewReduceGroup(ts []*tensor.Tensor, names []string, op tensor.ReduceOp, prescale, postscale float64) (ReduceGroup, error) {
	g, err := c.r.NewAllreduceGroup(ts, names, op, c.reduceArgs(prescale, postscale)...)
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
