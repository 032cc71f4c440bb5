package nn_test

import (
	"fmt"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/nn"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// Two ranks (goroutines, with hvd.RunLocal) hold uneven parts of one batch
// of a single feature: rank 0 the values 1 and 2, rank 1 the values 3, 4
// and 5. A sync layer normalises each rank's rows with the mean (3) and
// variance (2) of all five values, as one process would with the whole
// batch; its running mean moves a tenth of the way from 0 towards 3.
// The sync layer takes the same Collectives as the DistributedOptimizer,
// which reduces the layer's Params with the model's.
func ExampleNewBatchNorm() {
	out := make([][]float64, 2)
	var running float64
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		bn, err := nn.NewBatchNorm[float64]("bn1", 1, nn.Sync(coll))
		if err != nil {
			return err
		}
		x := [][]float64{{1, 2}, {3, 4, 5}}[rank]
		y, err := bn.Forward(x, len(x))
		if err != nil {
			return err
		}
		out[rank] = append([]float64(nil), y...)
		if rank == 0 {
			running = bn.RunningMean()[0]
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rank 0: %.4f\nrank 1: %.4f\nrunning mean %.2f\n", out[0], out[1], running)
	// Output:
	// rank 0: [-1.4142 -0.7071]
	// rank 1: [0.0000 0.7071 1.4142]
	// running mean 0.30
}
