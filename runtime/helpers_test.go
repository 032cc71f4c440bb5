package runtime

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// counting wraps a Communicator and counts the collectives the loop issues.
type counting struct {
	comm.Communicator
	dataAllreduce atomic.Int64 // allreduces other than the bit-vector agreement
	gathers       atomic.Int64
}

func (c *counting) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	if op != tensor.BitAnd && op != tensor.BitOr {
		c.dataAllreduce.Add(1)
	}
	return c.Communicator.Allreduce(buf, op)
}

func (c *counting) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	c.gathers.Add(1)
	return c.Communicator.Gatherv(send, recv, counts, root)
}

func testConfig() config.Config {
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	cfg.FusionThreshold = 1 << 20
	return cfg
}

// startWrapped starts n runtimes with cfg over one in-memory group, each
// over wrap of its member (a communicator that counts or stands in for a
// capability), and returns them with the wrappers; StopLocal stops them.
func startWrapped[C comm.Communicator](t *testing.T, n int, cfg config.Config, wrap func(comm.Communicator) C) ([]*Runtime, []C) {
	t.Helper()
	group := memcomm.NewGroup(n)
	coms := make([]C, n)
	rts := make([]*Runtime, n)
	errs := make(chan error, n)
	for i := range n {
		coms[i], rts[i] = wrap(group[i]), new(Runtime)
		go func() {
			errs <- rts[i].Init(WithCommunicator(coms[i]), WithConfig(cfg), WithLogger(zerolog.Nop()))
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return rts, coms
}

type cluster struct {
	rts    []*Runtime
	counts []*counting
}

// startCluster runs n runtimes over one in-memory group.
func startCluster(t *testing.T, n int, cfg config.Config) *cluster {
	t.Helper()
	return startClusterWith(t, n, WithConfig(cfg))
}

// each runs fn on every rank concurrently and reports errors.
func (c *cluster) each(t *testing.T, fn func(r *Runtime, rank int) error) {
	t.Helper()
	errs := commtest.OnRanks(commtest.Ranks(len(c.rts)), func(i int) error { return fn(c.rts[i], i) })
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// float32Tensors returns float32 tensors of the sizes given: views of one
// flat buffer, back to back (tensor.NewFlat), or separate allocations.
func float32Tensors(sizes []int, flat bool) []*tensor.Tensor {
	shapes := make([]tensor.Shape, len(sizes))
	for i, k := range sizes {
		shapes[i] = tensor.Shape{k}
	}
	if flat {
		_, ts := tensor.NewFlat(tensor.Float32, shapes...)
		return ts
	}
	ts := make([]*tensor.Tensor, len(sizes))
	for i, s := range shapes {
		ts[i] = tensor.New(tensor.Float32, s...)
	}
	return ts
}

// fill returns a tensor of dtype dt with n elements equal to v.
func fill(dt tensor.DType, n int, v float64) *tensor.Tensor {
	t := tensor.New(dt, n)
	f := tensor.New(tensor.Float64, n)
	for i := range f.Float64s() {
		f.Float64s()[i] = v
	}
	switch dt {
	case tensor.Float32:
		for i := range t.Float32s() {
			t.Float32s()[i] = float32(v)
		}
	case tensor.Float64:
		copy(t.Float64s(), f.Float64s())
	case tensor.Int32:
		for i := range t.Int32s() {
			t.Int32s()[i] = int32(v)
		}
	case tensor.Int64:
		for i := range t.Int64s() {
			t.Int64s()[i] = int64(v)
		}
	}
	return t
}

func first(t *tensor.Tensor) float64 {
	switch t.DType() {
	case tensor.Float32:
		return float64(t.Float32s()[0])
	case tensor.Float64:
		return t.Float64s()[0]
	case tensor.Int32:
		return float64(t.Int32s()[0])
	case tensor.Int64:
		return float64(t.Int64s()[0])
	}
	panic("dtype")
}

// groupStep runs one step of g, whose tensors are ts: it sets element j of
// tensor i to in(i, j), starts the step, waits for it and checks that the
// element became want(i, j). step names the step in the error.
func groupStep(ctx context.Context, g *AllreduceGroup, ts []*tensor.Tensor, step int, in, want func(i, j int) float32) error {
	for i, x := range ts {
		for j := range x.Float32s() {
			x.Float32s()[j] = in(i, j)
		}
	}
	h, err := g.Start()
	if err != nil {
		return err
	}
	if err := h.Wait(ctx); err != nil {
		return err
	}
	for i, x := range ts {
		for j, v := range x.Float32s() {
			if w := want(i, j); v != w {
				return fmt.Errorf("step %d tensor %d[%d] = %v, want %v", step, i, j, v, w)
			}
		}
	}
	return nil
}
