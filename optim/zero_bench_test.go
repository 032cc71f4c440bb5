package optim

import (
	"context"
	"fmt"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

// mlpParams are the parameters of examples/mnist's MLP (784-256-128-10,
// float32): 235,146 elements, the first layer's weight 85% of them.
func mlpParams() []Param {
	shapes := [][]int{{784, 256}, {256}, {256, 128}, {128}, {128, 10}, {10}}
	ps := make([]Param, len(shapes))
	for i, s := range shapes {
		ps[i] = Param{Name: fmt.Sprintf("p%d", i), Value: tensor.New(tensor.Float32, s...), Grad: tensor.New(tensor.Float32, s...)}
	}
	return ps
}

// stateBytes returns the bytes of s's tensors.
func stateBytes(s *State) int {
	n := 0
	for _, t := range s.Tensors {
		n += t.NumBytes()
	}
	return n
}

// BenchmarkZeroStateBytes prints the bytes of Adam state that the
// largest rank of Zero holds at 1 to 4 ranks on examples/mnist's MLP,
// against the unsharded Adam's, as custom metrics (state-bytes and
// x-unsharded); each iteration is one Zero stage-1 step of every rank.
func BenchmarkZeroStateBytes(b *testing.B) {
	mkAdam := func(ps []Param) (Optimizer, error) { return NewAdam(ps, AdamConfig{LR: 1e-3}) }
	whole, err := mkAdam(mlpParams())
	if err != nil {
		b.Fatal(err)
	}
	unsharded := stateBytes(whole.State())
	for _, n := range []int{1, 2, 3, 4} {
		b.Run(fmt.Sprint("np", n), func(b *testing.B) {
			rts := startRuntimes(b, n)
			zs := make([]*Zero, n)
			eachRank(b, n, func(rank int) error {
				coll, err := FromRuntime(rts[rank])
				if err != nil {
					return err
				}
				zs[rank], err = NewZero(mlpParams(), coll, mkAdam, ZeroConfig{Stage: 1})
				return err
			})
			b.ResetTimer()
			for range b.N {
				eachRank(b, n, func(rank int) error { return zs[rank].StepContext(context.Background()) })
			}
			b.StopTimer()
			largest := 0
			for _, z := range zs {
				largest = max(largest, stateBytes(z.State()))
			}
			b.ReportMetric(float64(largest), "state-bytes")
			b.ReportMetric(float64(largest)/float64(unsharded), "x-unsharded")
		})
	}
}

// BenchmarkByteGradBytes prints the bytes one rank sends per step, as the
// runtime counts them (Stats.SentBytes), when the gradients of
// examples/mnist's MLP travel by fp32 allreduce and by ByteGrad (one
// bucket per 64 KiB of gradients, the default), and their ratio, as custom
// metrics.
func BenchmarkByteGradBytes(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, algo := range []string{"allreduce", "bytegrad"} {
			b.Run(fmt.Sprintf("np%d/%s", n, algo), func(b *testing.B) {
				rts := startRuntimes(b, n)
				opts := make([]*DistributedOptimizer, n)
				eachRank(b, n, func(rank int) error {
					coll, err := FromRuntime(rts[rank])
					if err != nil {
						return err
					}
					sgd, err := NewSGD(mlpParams(), SGDConfig{LR: 1e-3})
					if err != nil {
						return err
					}
					var dopts []DistOption
					if algo == "bytegrad" {
						dopts = append(dopts, WithCommHook(NewByteGrad(ByteGradConfig{})))
					}
					opts[rank], err = NewDistributed(sgd, coll, dopts...)
					return err
				})
				defer eachRank(b, n, func(rank int) error { return opts[rank].Close() })
				before := rts[0].Stats().SentBytes
				b.ResetTimer()
				for range b.N {
					eachRank(b, n, func(rank int) error { return opts[rank].Step() })
				}
				b.StopTimer()
				perStep := float64(rts[0].Stats().SentBytes-before) / float64(b.N)
				fp32 := float64(4*235146) * 2 * float64(n-1) / float64(n)
				b.ReportMetric(perStep, "sent-bytes/step")
				b.ReportMetric(perStep/fp32, "x-fp32-allreduce")
			})
		}
	}
}

// eachRank runs f on every rank at once and fails on the first error.
func eachRank(b *testing.B, n int, f func(rank int) error) {
	errs := make(chan error, n)
	for r := range n {
		go func() { errs <- f(r) }()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkZeroStep times a step of every rank (2, in memory) on
// ResNet-50's gradient set with SGD: the DistributedOptimizer, and Zero at
// stages 1 and 2 (each gradient reported Ready in backward order first).
func BenchmarkZeroStep(b *testing.B) {
	const n = 2
	sizes := resnet50Shapes(b)
	for _, kind := range []string{"distributed", "zero1", "zero2"} {
		b.Run(kind, func(b *testing.B) {
			rts := startRuntimes(b, n)
			opts := make([]zeroStepper, n)
			eachRank(b, n, func(rank int) error {
				coll, err := FromRuntime(rts[rank])
				if err != nil {
					return err
				}
				mk := func(ps []Param) (Optimizer, error) { return NewSGD(ps, SGDConfig{LR: 1e-3}) }
				if kind == "distributed" {
					inner, err := mk(benchParams(sizes))
					if err != nil {
						return err
					}
					opts[rank], err = NewDistributed(inner, coll)
					return err
				}
				opts[rank], err = NewZero(benchParams(sizes), coll, mk, ZeroConfig{Stage: int(kind[4] - '0')})
				return err
			})
			b.SetBytes(int64(4 * sum(sizes)))
			b.ResetTimer()
			for range b.N {
				eachRank(b, n, func(rank int) error {
					ps := opts[rank].Params()
					for i := len(ps) - 1; i >= 0; i-- {
						if err := opts[rank].Ready(ps[i]); err != nil {
							return err
						}
					}
					return opts[rank].Step()
				})
			}
		})
	}
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
