package optim_test

import (
	"fmt"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// Two ranks train one weight w on the loss (w-target)²/2, each with its
// own target, 2 and 4, as in ExampleNewDistributed, but with post-local
// SGD: 2 synchronous steps (the gradients averaged: both ranks move
// towards 3), then local steps (each rank towards its own target) whose
// weights are averaged every 4 steps. The replicas differ between
// averagings and agree right after each.
func ExampleNewPostLocalSGD() {
	const steps = 10
	ws := make([][]float64, 2)
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
		dist, err := optim.NewDistributed(sgd, coll)
		if err != nil {
			return err
		}
		opt, err := optim.NewPostLocalSGD(dist, optim.LocalSGDConfig{StartLocalSGDIter: 2, ModelAveragingPeriod: 4})
		if err != nil {
			return err
		}
		defer opt.Close()
		target := float64(2 * (rank + 1))
		for range steps {
			if err := opt.ZeroGrad(); err != nil {
				return err
			}
			p.Grad.Float64s()[0] = p.Value.Float64s()[0] - target // backward
			if err := opt.Ready(p); err != nil {                  // starts the allreduce while synchronous
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
			ws[rank] = append(ws[rank], p.Value.Float64s()[0])
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	for s := range steps {
		fmt.Printf("step %2d: %.4f %.4f\n", s+1, ws[0][s], ws[1][s])
	}
	// Output:
	// step  1: 1.5000 1.5000
	// step  2: 2.2500 2.2500
	// step  3: 2.1250 3.1250
	// step  4: 2.0625 3.5625
	// step  5: 2.0312 3.7812
	// step  6: 2.9531 2.9531
	// step  7: 2.4766 3.4766
	// step  8: 2.2383 3.7383
	// step  9: 2.1191 3.8691
	// step 10: 2.9971 2.9971
}
