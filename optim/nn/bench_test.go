package nn

import (
	"fmt"
	"testing"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// BenchmarkBatchNorm: one local Forward and Backward in training mode, at
// a ladder of batch sizes and both element types.
func BenchmarkBatchNorm(b *testing.B) {
	b.Run("float32", func(b *testing.B) { benchBatchNorm[float32](b) })
	b.Run("float64", func(b *testing.B) { benchBatchNorm[float64](b) })
}

func benchBatchNorm[T Float](b *testing.B) {
	for _, s := range []struct{ n, c int }{{8, 256}, {64, 256}, {512, 256}} {
		b.Run(fmt.Sprintf("n%d_c%d", s.n, s.c), func(b *testing.B) {
			x, dy, _, _ := batch(1, 0, s.n, s.c)
			xt, dyt := convert[T](x), convert[T](dy)
			bn, err := NewBatchNorm[T]("bn", s.c)
			if err != nil {
				b.Fatal(err)
			}
			var z T
			b.SetBytes(int64(2 * s.n * s.c * int(sizeOf(z))))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bn.Forward(xt, s.n); err != nil {
					b.Fatal(err)
				}
				if _, err := bn.Backward(dyt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func sizeOf(v any) int {
	if _, ok := v.(float32); ok {
		return 4
	}
	return 8
}

// BenchmarkSyncBatchNorm: one sync Forward and Backward (two allreduces)
// on two in-memory ranks, batch 8 per rank, 256 features: the cost of the
// synchronisation, set mostly by the runtime's cycle (1 ms by default).
func BenchmarkSyncBatchNorm(b *testing.B) {
	rts := startRuntimes(b, 2)
	x, dy, _, _ := batch(1, 0, 8, 256)
	xt, dyt := convert[float32](x), convert[float32](dy)
	b.ReportAllocs()
	errs := make(chan error, 1)
	b.ResetTimer()
	// Rank 1 runs as many steps in its own goroutine; b.N is known
	// before the loop, so both ranks make the same calls.
	n := b.N
	go func() { errs <- syncSteps(rts[1], n, xt, dyt) }()
	if err := syncSteps(rts[0], n, xt, dyt); err != nil {
		b.Fatal(err)
	}
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func syncSteps(r *hvd.Runtime, steps int, x, dy []float32) error {
	coll, err := optim.FromRuntime(r)
	if err != nil {
		return err
	}
	bn, err := NewBatchNorm[float32]("benchbn", 256, Sync(coll))
	if err != nil {
		return err
	}
	for range steps {
		if _, err := bn.Forward(x, 8); err != nil {
			return err
		}
		if _, err := bn.Backward(dy); err != nil {
			return err
		}
	}
	return nil
}
