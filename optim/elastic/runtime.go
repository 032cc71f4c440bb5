package elastic

import (
	"context"
	"fmt"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// runtimeBroadcaster broadcasts bytes as a uint8 tensor, its length first.
type runtimeBroadcaster struct{ r *hvd.Runtime }

// FromRuntime returns the Broadcaster of r: BroadcastBytes broadcasts the
// length of root's bytes (an int64 tensor), then the bytes (a uint8 tensor)
// under the names "elastic.bytes.len" and "elastic.bytes.data", so it must
// not be called concurrently with itself on one rank.
func FromRuntime(r *hvd.Runtime) Broadcaster { return runtimeBroadcaster{r: r} }

// BroadcastBytes implements Broadcaster.
func (rb runtimeBroadcaster) BroadcastBytes(ctx context.Context, b []byte, root int) ([]byte, error) {
	isRoot := rb.r.Rank() == root
	var n int64
	if isRoot {
		n = int64(len(b))
	}
	nt := tensor.FromInt64([]int64{n})
	if err := rb.r.BroadcastInPlace(ctx, nt, root, "elastic.bytes.len"); err != nil {
		return nil, fmt.Errorf("elastic: broadcast of the length: %w", err)
	}
	n = nt.Int64s()[0]
	if n < 0 {
		return nil, fmt.Errorf("elastic: broadcast of a negative length %d", n)
	}
	if n == 0 {
		return []byte{}, nil
	}
	data := make([]byte, n)
	if isRoot {
		copy(data, b)
	}
	dt := tensor.FromUint8(data)
	if err := rb.r.BroadcastInPlace(ctx, dt, root, "elastic.bytes.data"); err != nil {
		return nil, fmt.Errorf("elastic: broadcast of %d bytes: %w", n, err)
	}
	return dt.Bytes(), nil
}
