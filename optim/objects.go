package optim

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"strings"

	"github.com/gohorovod/gohorovod/tensor"
)

// GatherCollectives is a Collectives that can also allgather: the result
// concatenates every rank's t along the first dimension, in rank order
// (the first dimension may differ across ranks). AllgatherObject needs it.
type GatherCollectives interface {
	Collectives
	// Allgather gathers t from every rank under name and returns the
	// concatenation.
	Allgather(ctx context.Context, t *tensor.Tensor, name string) (*tensor.Tensor, error)
}

// BroadcastObject sends root's *v to every rank (Horovod's
// broadcast_object): root encodes *v with encoding/gob, broadcasts the
// length, then the bytes; every other rank decodes them into *v. v must be
// a non-nil pointer to a gob-encodable value, of the same type on every
// rank; name must be the same on every rank.
func BroadcastObject[T any](ctx context.Context, c Collectives, v *T, root int, name string) error {
	rank, isRoot := -1, false
	var payload []byte
	if r, ok := rankOf(c); ok {
		rank = r
		isRoot = r == root
	}
	if isRoot || rank < 0 {
		// Every rank encodes when its rank is unknown; only root's bytes
		// survive the broadcast.
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(v); err != nil {
			return fmt.Errorf("optim: BroadcastObject %q: encoding: %w", name, err)
		}
		payload = buf.Bytes()
	}
	n := tensor.FromInt64([]int64{int64(len(payload))})
	if err := wait(ctx)(c.BroadcastAsync(n, root, "object."+name+".len")); err != nil {
		return fmt.Errorf("optim: BroadcastObject %q: length: %w", name, err)
	}
	size := int(n.Int64s()[0])
	if size < 0 {
		return fmt.Errorf("optim: BroadcastObject %q: negative length %d", name, size)
	}
	data := make([]byte, size)
	copy(data, payload)
	b := tensor.From(data)
	if err := wait(ctx)(c.BroadcastAsync(b, root, "object."+name+".bytes")); err != nil {
		return fmt.Errorf("optim: BroadcastObject %q: bytes: %w", name, err)
	}
	var out T
	if err := gob.NewDecoder(bytes.NewReader(b.Bytes())).Decode(&out); err != nil {
		return fmt.Errorf("optim: BroadcastObject %q: decoding: %w", name, err)
	}
	*v = out
	return nil
}

// AllgatherObject returns every rank's v, in rank order (Horovod's
// allgather_object): each rank gob-encodes v, the encoded lengths are
// gathered, then the bytes, and each rank decodes every rank's part. v must
// be gob-encodable and of the same type on every rank; name must be the
// same on every rank.
func AllgatherObject[T any](ctx context.Context, c GatherCollectives, v T, name string) ([]T, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&v); err != nil {
		return nil, fmt.Errorf("optim: AllgatherObject %q: encoding: %w", name, err)
	}
	lens, err := c.Allgather(ctx, tensor.FromInt64([]int64{int64(buf.Len())}), "object."+name+".len")
	if err != nil {
		return nil, fmt.Errorf("optim: AllgatherObject %q: lengths: %w", name, err)
	}
	all, err := c.Allgather(ctx, tensor.From(buf.Bytes()), "object."+name+".bytes")
	if err != nil {
		return nil, fmt.Errorf("optim: AllgatherObject %q: bytes: %w", name, err)
	}
	data := all.Bytes()
	out := make([]T, 0, lens.Len())
	off := 0
	for r, n := range lens.Int64s() {
		if n < 0 || off+int(n) > len(data) {
			return nil, fmt.Errorf("optim: AllgatherObject %q: rank %d's length %d does not fit the %d bytes gathered", name, r, n, len(data))
		}
		var x T
		if err := gob.NewDecoder(bytes.NewReader(data[off : off+int(n)])).Decode(&x); err != nil {
			return nil, fmt.Errorf("optim: AllgatherObject %q: decoding rank %d's value: %w", name, r, err)
		}
		out = append(out, x)
		off += int(n)
	}
	return out, nil
}

// Ranker is implemented by Collectives that know their rank; BroadcastObject
// uses it to encode on the root only.
type Ranker interface {
	// Rank returns this process's rank.
	Rank() int
}

func rankOf(c Collectives) (int, bool) {
	if r, ok := c.(Ranker); ok {
		return r.Rank(), true
	}
	return -1, false
}

// wait returns a function that waits under ctx for a collective just
// started: wait(ctx)(c.BroadcastAsync(...)).
func wait(ctx context.Context) func(Waiter, error) error {
	return func(h Waiter, err error) error {
		if err != nil {
			return err
		}
		return h.Wait(ctx)
	}
}

// Metric is a weighted mean accumulated locally during distributed
// evaluation (loss over batches, accuracy over samples) and averaged over
// every rank's samples by AverageMetrics, as Horovod's metric averaging
// callback does. The zero value is an empty metric with a name to set.
type Metric struct {
	Name        string  // the same on every rank
	Sum, Weight float64 // Σ value·weight and Σ weight of this rank
}

// Add accumulates value with weight (a batch's mean loss with the batch
// size, or 1 per correct sample with weight 1 per sample).
func (m *Metric) Add(value, weight float64) {
	m.Sum += value * weight
	m.Weight += weight
}

// Local returns this rank's weighted mean (NaN with no weight).
func (m *Metric) Local() float64 { return m.Sum / m.Weight }

// Reset empties the metric.
func (m *Metric) Reset() { m.Sum, m.Weight = 0, 0 }

// AverageMetrics returns, for each metric, the weighted mean over every
// rank's accumulated values (Σ over ranks of Sum / Σ of Weight), with one
// allreduce for all of them; ranks must pass metrics of the same names in
// the same order. A metric without weight on any rank averages to NaN.
func AverageMetrics(ctx context.Context, c Collectives, metrics ...*Metric) ([]float64, error) {
	if len(metrics) == 0 {
		return nil, nil
	}
	v := make([]float64, 0, 2*len(metrics))
	names := make([]string, len(metrics))
	for i, m := range metrics {
		v = append(v, m.Sum, m.Weight)
		names[i] = m.Name
	}
	t := tensor.FromFloat64(v)
	name := "metrics." + strings.Join(names, ",")
	if err := wait(ctx)(c.AllreduceAsync(t, name, Sum, 1, 1)); err != nil {
		return nil, fmt.Errorf("optim: averaging metrics %v: %w", names, err)
	}
	out := make([]float64, len(metrics))
	for i := range out {
		out[i] = v[2*i] / v[2*i+1]
	}
	return out, nil
}
