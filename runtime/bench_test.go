package runtime

import (
	"context"
	"fmt"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/tensor"
)

// BenchmarkGroupStep measures the runtime's own cost of one cached step of
// an AllreduceGroup on one rank (the transport does nothing): enqueueing,
// the cycle's cache lookups and agreement, planning, taking the entries,
// completing the handle. It reports the cost per tensor beside the total.
func BenchmarkGroupStep(b *testing.B) {
	for _, n := range []int{161, 1000} {
		for _, flat := range []bool{false, true} {
			b.Run(fmt.Sprintf("tensors=%d/flat=%v", n, flat), func(b *testing.B) {
				benchGroupStep(b, n, flat)
			})
		}
	}
}

func benchGroupStep(b *testing.B, n int, flat bool) {
	cfg := testConfig()
	cfg.CacheCapacity = 2 * n
	cfg.FusionThreshold = 64 << 20
	rts, err := StartLocal(1, WithConfig(cfg), WithLogger(zerolog.Nop()))
	if err != nil {
		b.Fatal(err)
	}
	defer StopLocal(rts)
	shapes := make([]tensor.Shape, n)
	names := make([]string, n)
	for i := range shapes {
		shapes[i] = tensor.Shape{16}
		names[i] = fmt.Sprintf("bench.%d", i)
	}
	var ts []*tensor.Tensor
	if flat {
		_, ts = tensor.NewFlat(tensor.Float32, shapes...)
	} else {
		for _, s := range shapes {
			ts = append(ts, tensor.New(tensor.Float32, s...))
		}
	}
	g, err := rts[0].NewAllreduceGroup(ts, names, Sum)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	step := func() {
		h, err := g.Start()
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		step() // negotiate and fill the cache
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/tensor")
}
