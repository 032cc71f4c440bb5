package runtime

import (
	"context"
	"sync/atomic"

	"github.com/gohorovod/gohorovod/tensor"
)

// std is the default Runtime behind the package-level functions.
var std atomic.Pointer[Runtime]

func init() { std.Store(new(Runtime)) }

// Default returns the Runtime that the package-level functions use.
func Default() *Runtime { return std.Load() }

// SetDefault makes r the Runtime behind the package-level functions and
// returns the previous one. Swap it before Init, not while operations are in
// flight.
func SetDefault(r *Runtime) *Runtime { return std.Swap(r) }

// Init initialises the default Runtime (see Runtime.Init).
func Init(opts ...Option) error { return Default().Init(opts...) }

// Shutdown shuts the default Runtime down (see Runtime.Shutdown).
func Shutdown() error { return Default().Shutdown() }

// StartTimeline starts the default Runtime's timeline in a new file (see
// Runtime.StartTimeline).
func StartTimeline(path string, markCycles bool) error {
	return Default().StartTimeline(path, markCycles)
}

// StopTimeline stops the default Runtime's timeline (see
// Runtime.StopTimeline).
func StopTimeline() error { return Default().StopTimeline() }

// IsInitialized reports whether the default Runtime is running.
func IsInitialized() bool { return Default().IsInitialized() }

// Rank returns the default Runtime's rank (-1 before Init).
func Rank() int { return Default().Rank() }

// Size returns the default Runtime's number of ranks (-1 before Init).
func Size() int { return Default().Size() }

// LocalRank returns the default Runtime's rank on its node.
func LocalRank() int { return Default().LocalRank() }

// LocalSize returns the number of ranks on the default Runtime's node.
func LocalSize() int { return Default().LocalSize() }

// CrossRank returns the default Runtime's node index among the ranks with
// its local rank.
func CrossRank() int { return Default().CrossRank() }

// CrossSize returns the number of nodes with a rank of the default
// Runtime's local rank.
func CrossSize() int { return Default().CrossSize() }

// MPIEnabled reports whether the default Runtime runs over MPI.
func MPIEnabled() bool { return Default().MPIEnabled() }

// MPIThreadsSupported reports whether MPI runs with MPI_THREAD_MULTIPLE.
func MPIThreadsSupported() (bool, error) { return Default().MPIThreadsSupported() }

// Allreduce: see Runtime.Allreduce.
func Allreduce(ctx context.Context, t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*tensor.Tensor, error) {
	return Default().Allreduce(ctx, t, name, op, opts...)
}

// AllreduceInPlace: see Runtime.AllreduceInPlace.
func AllreduceInPlace(ctx context.Context, t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) error {
	return Default().AllreduceInPlace(ctx, t, name, op, opts...)
}

// AllreduceAsync: see Runtime.AllreduceAsync.
func AllreduceAsync(t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	return Default().AllreduceAsync(t, name, op, opts...)
}

// AllreduceAsyncInPlace: see Runtime.AllreduceAsyncInPlace.
func AllreduceAsyncInPlace(t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	return Default().AllreduceAsyncInPlace(t, name, op, opts...)
}

// GroupedAllreduce: see Runtime.GroupedAllreduce.
func GroupedAllreduce(ctx context.Context, ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) ([]*tensor.Tensor, error) {
	return Default().GroupedAllreduce(ctx, ts, name, op, opts...)
}

// GroupedAllreduceAsync: see Runtime.GroupedAllreduceAsync.
func GroupedAllreduceAsync(ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	return Default().GroupedAllreduceAsync(ts, name, op, opts...)
}

// GroupedAllreduceAsyncInPlace: see Runtime.GroupedAllreduceAsyncInPlace.
func GroupedAllreduceAsyncInPlace(ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	return Default().GroupedAllreduceAsyncInPlace(ts, name, op, opts...)
}

// GroupedAllgather: see Runtime.GroupedAllgather.
func GroupedAllgather(ctx context.Context, ts []*tensor.Tensor, name string, opts ...CallOption) ([]*tensor.Tensor, error) {
	return Default().GroupedAllgather(ctx, ts, name, opts...)
}

// GroupedAllgatherAsync: see Runtime.GroupedAllgatherAsync.
func GroupedAllgatherAsync(ts []*tensor.Tensor, name string, opts ...CallOption) (*Handle, error) {
	return Default().GroupedAllgatherAsync(ts, name, opts...)
}

// GroupedReducescatter: see Runtime.GroupedReducescatter.
func GroupedReducescatter(ctx context.Context, ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) ([]*tensor.Tensor, error) {
	return Default().GroupedReducescatter(ctx, ts, name, op, opts...)
}

// GroupedReducescatterAsync: see Runtime.GroupedReducescatterAsync.
func GroupedReducescatterAsync(ts []*tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	return Default().GroupedReducescatterAsync(ts, name, op, opts...)
}

// Allgather: see Runtime.Allgather.
func Allgather(ctx context.Context, t *tensor.Tensor, name string, opts ...CallOption) (*tensor.Tensor, error) {
	return Default().Allgather(ctx, t, name, opts...)
}

// AllgatherAsync: see Runtime.AllgatherAsync.
func AllgatherAsync(t *tensor.Tensor, name string, opts ...CallOption) (*Handle, error) {
	return Default().AllgatherAsync(t, name, opts...)
}

// Broadcast: see Runtime.Broadcast.
func Broadcast(ctx context.Context, t *tensor.Tensor, root int, name string, opts ...CallOption) (*tensor.Tensor, error) {
	return Default().Broadcast(ctx, t, root, name, opts...)
}

// BroadcastInPlace: see Runtime.BroadcastInPlace.
func BroadcastInPlace(ctx context.Context, t *tensor.Tensor, root int, name string, opts ...CallOption) error {
	return Default().BroadcastInPlace(ctx, t, root, name, opts...)
}

// BroadcastAsync: see Runtime.BroadcastAsync.
func BroadcastAsync(t *tensor.Tensor, root int, name string, opts ...CallOption) (*Handle, error) {
	return Default().BroadcastAsync(t, root, name, opts...)
}

// BroadcastAsyncInPlace: see Runtime.BroadcastAsyncInPlace.
func BroadcastAsyncInPlace(t *tensor.Tensor, root int, name string, opts ...CallOption) (*Handle, error) {
	return Default().BroadcastAsyncInPlace(t, root, name, opts...)
}

// Alltoall: see Runtime.Alltoall.
func Alltoall(ctx context.Context, t *tensor.Tensor, splits []int, name string, opts ...CallOption) (*tensor.Tensor, []int, error) {
	return Default().Alltoall(ctx, t, splits, name, opts...)
}

// AlltoallAsync: see Runtime.AlltoallAsync.
func AlltoallAsync(t *tensor.Tensor, splits []int, name string, opts ...CallOption) (*Handle, error) {
	return Default().AlltoallAsync(t, splits, name, opts...)
}

// Exchange: see Runtime.Exchange.
func Exchange(ctx context.Context, t *tensor.Tensor, dest, source int, name string, opts ...CallOption) (*tensor.Tensor, error) {
	return Default().Exchange(ctx, t, dest, source, name, opts...)
}

// ExchangeAsync: see Runtime.ExchangeAsync.
func ExchangeAsync(t *tensor.Tensor, dest, source int, name string, opts ...CallOption) (*Handle, error) {
	return Default().ExchangeAsync(t, dest, source, name, opts...)
}

// Reducescatter: see Runtime.Reducescatter.
func Reducescatter(ctx context.Context, t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*tensor.Tensor, error) {
	return Default().Reducescatter(ctx, t, name, op, opts...)
}

// ReducescatterAsync: see Runtime.ReducescatterAsync.
func ReducescatterAsync(t *tensor.Tensor, name string, op ReduceOp, opts ...CallOption) (*Handle, error) {
	return Default().ReducescatterAsync(t, name, op, opts...)
}

// Barrier: see Runtime.Barrier.
func Barrier(ctx context.Context, opts ...CallOption) error { return Default().Barrier(ctx, opts...) }

// Join: see Runtime.Join.
func Join(ctx context.Context, opts ...CallOption) (int, error) { return Default().Join(ctx, opts...) }

// JoinAsync: see Runtime.JoinAsync.
func JoinAsync(opts ...CallOption) (*Handle, error) { return Default().JoinAsync(opts...) }

// NewAllreduceGroup prepares an AllreduceGroup on the default Runtime.
func NewAllreduceGroup(ts []*tensor.Tensor, names []string, op ReduceOp, opts ...CallOption) (*AllreduceGroup, error) {
	return Default().NewAllreduceGroup(ts, names, op, opts...)
}

// AddProcessSet calls AddProcessSet on the default Runtime.
func AddProcessSet(ctx context.Context, ranks []int) (*ProcessSet, error) {
	return Default().AddProcessSet(ctx, ranks)
}

// RemoveProcessSet calls RemoveProcessSet on the default Runtime.
func RemoveProcessSet(ctx context.Context, ps *ProcessSet) error {
	return Default().RemoveProcessSet(ctx, ps)
}

// GlobalProcessSet calls GlobalProcessSet on the default Runtime.
func GlobalProcessSet() *ProcessSet { return Default().GlobalProcessSet() }

// ProcessSets calls ProcessSets on the default Runtime.
func ProcessSets() []*ProcessSet { return Default().ProcessSets() }
