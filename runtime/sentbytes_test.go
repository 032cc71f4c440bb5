package runtime

import (
	"fmt"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

// TestStatsSentBytes: each host collective adds to SentBytes what the
// bandwidth-optimal algorithm sends from this rank, at 2 and 3 ranks (3
// has shares that do not divide evenly).
func TestStatsSentBytes(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			c := startCluster(t, n, testConfig())
			ctx := ctxT(t)
			const elems = 1200 // float32: 4800 bytes
			type op struct {
				name string
				run  func(r *Runtime, rank int) error
				want func(rank int) int64
			}
			ops := []op{
				{"allreduce", func(r *Runtime, _ int) error {
					_, err := r.Allreduce(ctx, tensor.New(tensor.Float32, elems), "sb.ar", Sum)
					return err
				}, func(int) int64 { return int64(4 * elems * 2 * (n - 1) / n) }},
				{"allgather", func(r *Runtime, rank int) error {
					_, err := r.Allgather(ctx, tensor.New(tensor.Float32, rank+1, 10), "sb.ag")
					return err
				}, func(rank int) int64 { return int64(4 * 10 * (rank + 1) * (n - 1)) }},
				{"alltoall", func(r *Runtime, rank int) error {
					splits := make([]int, n)
					for i := range splits {
						splits[i] = i + 1
					}
					_, _, err := r.Alltoall(ctx, tensor.New(tensor.Uint8, n*(n+1)/2, 3), splits, "sb.a2a")
					return err
				}, func(rank int) int64 { return int64(3 * (n*(n+1)/2 - (rank + 1))) }},
				{"reducescatter", func(r *Runtime, _ int) error {
					_, err := r.Reducescatter(ctx, tensor.New(tensor.Float32, elems), "sb.rs", Sum)
					return err
				}, func(int) int64 { return int64(4 * elems * (n - 1) / n) }},
				{"broadcast", func(r *Runtime, _ int) error {
					_, err := r.Broadcast(ctx, tensor.New(tensor.Float64, 7), 1, "sb.bc")
					return err
				}, func(rank int) int64 {
					if rank == 1 {
						return 56
					}
					return 0
				}},
			}
			for _, o := range ops {
				c.each(t, func(r *Runtime, rank int) error {
					before := r.Stats().SentBytes
					if err := o.run(r, rank); err != nil {
						return err
					}
					if got, want := r.Stats().SentBytes-before, o.want(rank); got != want {
						return fmt.Errorf("%s: SentBytes grew by %d, want %d", o.name, got, want)
					}
					return nil
				})
			}
		})
	}
}
