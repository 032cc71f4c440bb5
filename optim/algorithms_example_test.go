package optim_test

import (
	"context"
	"fmt"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// exampleTrain runs 40 steps of the loss (w−target)²/2 with rank's
// target, 2 or 4, through opt and returns w: the ranks' mean pulls it to 3.
func exampleTrain(opt interface {
	ZeroGrad() error
	Ready(optim.Param) error
	Step() error
}, p optim.Param, rank int) (float64, error) {
	w, gw := p.Value.Float64s(), p.Grad.Float64s()
	target := float64(2 * (rank + 1))
	for range 40 {
		if err := opt.ZeroGrad(); err != nil {
			return 0, err
		}
		for i := range gw {
			gw[i] = w[i] - target
		}
		if err := opt.Ready(p); err != nil {
			return 0, err
		}
		if err := opt.Step(); err != nil {
			return 0, err
		}
	}
	return w[0], nil
}

// ByteGrad sends each bucket of gradients in 8 bits: the weights reach
// the mean of the ranks' targets within the quantization step, with
// about a quarter of fp32 allreduce's bytes (the runtime's
// Stats.SentBytes counts them).
func ExampleNewByteGrad() {
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		p := optim.Param{Name: "w", Value: tensor.New(tensor.Float64, 64), Grad: tensor.New(tensor.Float64, 64)}
		sgd, err := optim.NewSGD([]optim.Param{p}, optim.SGDConfig{LR: 0.5})
		if err != nil {
			return err
		}
		opt, err := optim.NewDistributed(sgd, coll, optim.WithCommHook(optim.NewByteGrad(optim.ByteGradConfig{ErrorFeedback: true})))
		if err != nil {
			return err
		}
		defer opt.Close()
		w, err := exampleTrain(opt, p, rank)
		if rank == 0 {
			fmt.Printf("w ≈ %.2f\n", w)
		}
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: w ≈ 3.00
}

// QAdam runs plain Adam for its warm-up steps, then averages 8-bit
// momenta with its second moment frozen; its Hook does both exchanges.
func ExampleNewQAdam() {
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		p := optim.Param{Name: "w", Value: tensor.New(tensor.Float64, 8), Grad: tensor.New(tensor.Float64, 8)}
		q, err := optim.NewQAdam([]optim.Param{p}, optim.QAdamConfig{AdamConfig: optim.AdamConfig{LR: 0.1}, Warmup: 10})
		if err != nil {
			return err
		}
		opt, err := optim.NewDistributed(q, coll, optim.WithCommHook(q.Hook()))
		if err != nil {
			return err
		}
		defer opt.Close()
		w, err := exampleTrain(opt, p, rank)
		if rank == 0 {
			fmt.Printf("w ≈ %.0f\n", w)
		}
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: w ≈ 3
}

// Zero shards Adam's state: each of the 2 ranks holds the moments of half
// of the 10 weights, and the consolidated state on rank 0 is the whole
// one, as the unsharded Adam would hold it.
func ExampleNewZero() {
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		p := optim.Param{Name: "w", Value: tensor.New(tensor.Float64, 10), Grad: tensor.New(tensor.Float64, 10)}
		adam := func(ps []optim.Param) (optim.Optimizer, error) {
			return optim.NewAdam(ps, optim.AdamConfig{LR: 0.1})
		}
		z, err := optim.NewZero([]optim.Param{p}, coll, adam, optim.ZeroConfig{Stage: 2})
		if err != nil {
			return err
		}
		w, err := exampleTrain(z, p, rank)
		if err != nil {
			return err
		}
		full, err := z.ConsolidateState(context.Background(), 0)
		if rank == 0 {
			lo, hi := z.Range()
			fmt.Printf("w ≈ %.0f; rank 0 holds exp_avg of %d weights; consolidated: %v\n",
				w, hi-lo, full.Tensors["w/exp_avg"].Shape())
		}
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: w ≈ 3; rank 0 holds exp_avg of 5 weights; consolidated: [10]
}
