package optim_test

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// trainOne trains one weight w, from 0, on the loss (w-target)²/2 with
// opt (wrapping SGD over p), for steps steps, and returns w after each;
// start, if not nil, runs before each step's backward.
func trainOne(opt optim.Optimizer, p optim.Param, target float64, steps int, start func() error) ([]float64, error) {
	var ws []float64
	for range steps {
		if start != nil {
			if err := start(); err != nil {
				return nil, err
			}
		}
		if err := opt.ZeroGrad(); err != nil {
			return nil, err
		}
		p.Grad.Float64s()[0] = p.Value.Float64s()[0] - target // backward
		if err := opt.Step(); err != nil {
			return nil, err
		}
		ws = append(ws, p.Value.Float64s()[0])
	}
	return ws, nil
}

// Four ranks train one weight each towards its own target (0, 4, 8, 12)
// with decentralized SGD, ShiftOne: before each step a rank averages its
// weight with one peer (0 with 2 and 1 with 3, then 0 with 3 and 1 with
// 2, ...), then steps on its own gradient: the mean of the weights nears
// the mean of the targets, 6, without any allreduce.
func ExampleNewDecentralized() {
	const steps = 6
	ws := make([][]float64, 4)
	err := hvd.RunLocal(4, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		p := optim.Param{Name: "w", Value: tensor.FromFloat64([]float64{0}), Grad: tensor.New(tensor.Float64, 1)}
		sgd, err := optim.NewSGD([]optim.Param{p}, optim.SGDConfig{LR: 0.5})
		if err != nil {
			return err
		}
		dec, err := optim.NewDecentralized(sgd, coll.(optim.ExchangeCollectives),
			optim.DecentralizedConfig{PeerSelection: optim.PeerShiftOne, CommunicationInterval: 1})
		if err != nil {
			return err
		}
		ws[rank], err = trainOne(dec, p, float64(4*rank), steps, dec.Start) // Start: before the forward pass
		return err
	})
	if err != nil {
		fmt.Println(err)
	}
	for s := range steps {
		fmt.Printf("step %d: %6.3f %6.3f %6.3f %6.3f\n", s+1, ws[0][s], ws[1][s], ws[2][s], ws[3][s])
	}
	// Output:
	// step 1:  0.000  2.000  4.000  6.000
	// step 2:  3.000  4.000  5.000  6.000
	// step 3:  2.500  5.000  5.500  8.000
	// step 4:  4.000  4.750  6.500  7.250
	// step 5:  3.250  5.625  6.000  8.375
	// step 6:  4.188  5.000  6.812  7.625
}

// MinMaxUInt8 keeps each value within half a step (1/255 of the range);
// NaN and Inf are refused.
func ExampleQuantizeMinMaxUint8() {
	src := []float32{-1, -0.5, 0, 0.25, 1}
	q := make([]byte, len(src))
	lo, hi, err := optim.QuantizeMinMaxUint8(src, q)
	if err != nil {
		fmt.Println(err)
		return
	}
	back := make([]float32, len(q))
	optim.DequantizeMinMaxUint8(q, lo, hi, back)
	fmt.Println(lo, hi, q)
	fmt.Printf("%.4f\n", back)
	_, _, err = optim.QuantizeMinMaxUint8([]float32{1, float32(math.NaN())}, make([]byte, 2))
	fmt.Println(err)
	// Output:
	// -1 1 [0 64 127 159 255]
	// [-1.0000 -0.4980 -0.0039 0.2471 1.0000]
	// optim: cannot quantize a value that is not finite: element 1 is NaN
}

// Three ranks train at their own pace, each towards its own target, and
// average their weights in the background every millisecond; Finish
// averages once more, so that they end with the same weight.
func ExampleNewAsyncModelAverage() {
	final := make([]float64, 3)
	err := hvd.RunLocal(3, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		p := optim.Param{Name: "w", Value: tensor.FromFloat64([]float64{0}), Grad: tensor.New(tensor.Float64, 1)}
		sgd, err := optim.NewSGD([]optim.Param{p}, optim.SGDConfig{LR: 0.1})
		if err != nil {
			return err
		}
		avg, err := optim.NewAsyncModelAverage(sgd, coll, optim.AsyncConfig{Interval: time.Millisecond})
		if err != nil {
			return err
		}
		if _, err := trainOne(avg, p, float64(rank), 20*(rank+1), nil); err != nil { // 20, 40 and 60 steps
			return err
		}
		if err := avg.Finish(context.Background()); err != nil {
			return err
		}
		final[rank] = p.Value.Float64s()[0]
		return nil
	})
	fmt.Println(err, final[0] == final[1] && final[1] == final[2])
	// Output:
	// <nil> true
}
