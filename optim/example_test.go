package optim_test

import (
	"context"
	"fmt"
	"math"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// Two ranks (goroutines, with hvd.RunLocal) train one weight w on the
// loss (w-target)²/2, each rank with its own target, 2 and 4: the
// averaged gradient leads both to w = 3. The model keeps its weight and
// gradient in its own slices, wrapped in the Param's tensors; backward
// writes the gradient into its slice and reports it with Ready so that
// its allreduce starts at once; Step waits for it and runs SGD, which
// updates the weight's slice. Close releases the optimizer's reduce
// groups.
func ExampleNewDistributed() {
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		w, gw := []float64{0}, []float64{0}
		p := optim.Param{Name: "w", Value: tensor.FromFloat64(w), Grad: tensor.FromFloat64(gw)}
		sgd, err := optim.NewSGD([]optim.Param{p}, optim.SGDConfig{LR: 0.5})
		if err != nil {
			return err
		}
		opt, err := optim.NewDistributed(sgd, coll) // optim.Average, hvd.Average: the same op
		if err != nil {
			return err
		}
		defer opt.Close()
		target := float64(2 * (rank + 1))
		for range 30 {
			if err := opt.ZeroGrad(); err != nil {
				return err
			}
			gw[0] = w[0] - target // backward
			if err := opt.Ready(p); err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
		}
		if rank == 0 {
			fmt.Printf("w = %.4f\n", w[0])
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: w = 3.0000
}

// FlatGradients(true) moves the gradients into one flat buffer that the
// runtime reduces where it lies: the model must then reach its gradient
// through p.Grad (the same tensor, re-pointed at the buffer), not
// through a slice it took before NewDistributed.
func ExampleFlatGradients() {
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		p := optim.Param{Name: "w", Value: tensor.FromFloat64([]float64{0}), Grad: tensor.New(tensor.Float64, 1)}
		sgd, err := optim.NewSGD([]optim.Param{p}, optim.SGDConfig{LR: 0.5})
		if err != nil {
			return err
		}
		opt, err := optim.NewDistributed(sgd, coll, optim.FlatGradients(true))
		if err != nil {
			return err
		}
		defer opt.Close()
		target := float64(2 * (rank + 1))
		for range 30 {
			if err := opt.ZeroGrad(); err != nil {
				return err
			}
			p.Grad.Float64s()[0] = p.Value.Float64s()[0] - target // backward, through p.Grad
			if err := opt.Ready(p); err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
		}
		if rank == 0 {
			fmt.Printf("w = %.4f\n", p.Value.Float64s()[0])
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: w = 3.0000
}

// Every rank builds its model from its own seed; BroadcastParameters
// gives all of them rank 0's weights before training.
func ExampleBroadcastParameters() {
	const n = 3
	weights := make([][]float32, n)
	err := hvd.RunLocal(n, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		w := []float32{float32(rank + 1), float32(10 * (rank + 1))} // "random" initialisation
		params := []optim.Param{{Name: "w", Value: tensor.FromFloat32(w, 2), Grad: tensor.New(tensor.Float32, 2)}}
		if err := optim.BroadcastParameters(context.Background(), coll, params, 0); err != nil {
			return err
		}
		weights[rank] = w
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	for rank, w := range weights {
		fmt.Println("rank", rank, w)
	}
	// Output:
	// rank 0 [1 10]
	// rank 1 [1 10]
	// rank 2 [1 10]
}

// Each rank evaluates its share of a test set of uneven size; AverageMetrics
// gives the mean over every sample, not the mean of the ranks' means.
func ExampleAverageMetrics() {
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		acc := optim.Metric{Name: "accuracy"}
		loss := optim.Metric{Name: "loss"}
		if rank == 0 { // 100 samples, 90 right
			acc.Add(0.9, 100)
			loss.Add(0.25, 100)
		} else { // 300 samples, 180 right
			acc.Add(0.6, 300)
			loss.Add(0.75, 300)
		}
		v, err := optim.AverageMetrics(context.Background(), coll, &acc, &loss)
		if err != nil {
			return err
		}
		if rank == 0 {
			fmt.Printf("accuracy %.3f, loss %.3f (rank 0 alone: %.3f, %.3f)\n", v[0], v[1], acc.Local(), loss.Local())
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: accuracy 0.675, loss 0.625 (rank 0 alone: 0.900, 0.250)
}

// Two ranks average the gradient of a 64x32 weight with rank-2 PowerSGD:
// each rank sends (64+32)·2 floats instead of 64·32, and after the
// warm-up step of plain averaging the averaged gradient is only
// approximated (error feedback keeps what is lost for the next steps). A
// rank-2 gradient, as here, is recovered exactly.
func ExampleNewPowerSGD() {
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		p := optim.Param{Name: "fc.weight", Value: tensor.New(tensor.Float32, 64, 32), Grad: tensor.New(tensor.Float32, 64, 32)}
		sgd, err := optim.NewSGD([]optim.Param{p}, optim.SGDConfig{LR: 0.1})
		if err != nil {
			return err
		}
		psgd, err := optim.NewPowerSGD(optim.PowerSGDConfig{MatrixApproximationRank: 2, StartPowerSGDIter: 1})
		if err != nil {
			return err
		}
		opt, err := optim.NewDistributed(sgd, coll, optim.WithCommHook(psgd))
		if err != nil {
			return err
		}
		defer opt.Close()
		for step := range 3 {
			if err := opt.ZeroGrad(); err != nil {
				return err
			}
			g := p.Grad.Float32s() // rank 0: 2 at (i, 0); rank 1: 4 at (i, 1)
			for i := range 64 {
				g[i*32+rank] = float32(2 * (rank + 1))
			}
			if err := opt.Synchronize(context.Background()); err != nil {
				return err
			}
			if rank == 0 {
				fmt.Printf("step %d: (0,0) %.3f, (0,1) %.3f, (0,2) %.3f\n", step, g[0], g[1], g[2])
			}
			if err := opt.Unwrap().Step(); err != nil {
				return err
			}
		}
		if rank == 0 {
			fmt.Println("bytes sent:", psgd.BytesAllreduced())
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// step 0: (0,0) 1.000, (0,1) 2.000, (0,2) 0.000
	// step 1: (0,0) 1.000, (0,1) 2.000, (0,2) 0.000
	// step 2: (0,0) 1.000, (0,1) 2.000, (0,2) 0.000
	// bytes sent: 9728
}

// clipHook is a user's communication hook: it clips each rank's gradient
// to norm at most 1 before averaging it (the plain allreduce hook does
// the rest). Start runs as soon as the bucket's gradients are Ready;
// Finish once every bucket of the step has arrived.
type clipHook struct{}

func (clipHook) Start(c optim.Collectives, b *optim.Bucket) (optim.Waiter, error) {
	for _, g := range b.Grads {
		v := g.Float64s()
		var sq float64
		for _, x := range v {
			sq += x * x
		}
		if n := math.Sqrt(sq); n > 1 {
			for i := range v {
				v[i] /= n
			}
		}
	}
	return optim.AllreduceHook().Start(c, b) // names derived from b.Name
}

func (clipHook) Finish(b *optim.Bucket) error { return optim.AllreduceHook().Finish(b) }

// Two ranks average the gradient of a 2-vector through a communication
// hook of their own (WithCommHook): rank 0's gradient (3, 4) is clipped to
// norm 1, (0.6, 0.8), rank 1's (0, 0.5) is left as it is, and both ranks
// step with their mean.
func ExampleWithCommHook() {
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		p := optim.Param{Name: "w", Value: tensor.New(tensor.Float64, 2), Grad: tensor.New(tensor.Float64, 2)}
		sgd, err := optim.NewSGD([]optim.Param{p}, optim.SGDConfig{LR: 1})
		if err != nil {
			return err
		}
		opt, err := optim.NewDistributed(sgd, coll, optim.WithCommHook(clipHook{}))
		if err != nil {
			return err
		}
		defer opt.Close()
		if err := opt.ZeroGrad(); err != nil {
			return err
		}
		copy(p.Grad.Float64s(), [][]float64{{3, 4}, {0, 0.5}}[rank]) // backward
		if err := opt.Ready(p); err != nil {
			return err
		}
		if err := opt.Step(); err != nil {
			return err
		}
		if rank == 0 {
			fmt.Printf("gradient %.2f, w %.2f\n", p.Grad.Float64s(), p.Value.Float64s())
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// gradient [0.30 0.65], w [-0.30 -0.65]
}
