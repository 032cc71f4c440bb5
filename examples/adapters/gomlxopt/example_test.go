package gomlxopt_test

import (
	"context"
	"fmt"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/gohorovod/gohorovod/examples/adapters/gomlxopt"
	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// A linear regression trained data parallel: here two ranks in one process
// (hvd.RunLocal); in a job, each process calls hvd.Init and uses
// hvd.Default(), and gohorovodrun starts the processes.
func Example() {
	model := func(ctx *mlctx.Context, _ any, in []*graph.Node) []*graph.Node {
		return []*graph.Node{layers.DenseWithBias(ctx, in[0], 1)}
	}
	// GoMLX's pure-Go backend, one op at a time (its parallel executor
	// suits large graphs).
	backend, err := simplego.New("ops_sequential")
	if err != nil {
		fmt.Println(err)
		return
	}
	err = hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		ctx := mlctx.New()
		ctx.SetParam(mlctx.ParamInitialSeed, int64(rank+1)) // different on each rank: rank 0's are broadcast
		tr, err := gomlxopt.NewTrainer(backend, ctx, model, losses.MeanSquaredError,
			optimizers.StochasticGradientDescent().Done(), coll)
		if err != nil {
			return err
		}
		if err := tr.SetLR(gomlxopt.ScaleLR(0.1, r.Size())); err != nil { // Horovod's scaling
			return err
		}
		// Each rank's shard of y = 2x + 1.
		x := []float32{float32(rank), float32(rank) + 0.5}
		y := []float32{2*x[0] + 1, 2*x[1] + 1}
		in := tensors.FromFlatDataAndDimensions(x, 2, 1)
		lab := tensors.FromFlatDataAndDimensions(y, 2, 1)
		var loss float64
		for range 1000 {
			if loss, err = tr.TrainStep(context.Background(), []*tensors.Tensor{in}, []*tensors.Tensor{lab}); err != nil {
				return err
			}
		}
		if rank == 0 {
			w := tensors.MustCopyFlatData[float32](ctx.In("dense").InspectVariableInScope("weights").MustValue())
			fmt.Printf("loss %.4f, weight %.1f\n", loss, w[0])
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output: loss 0.0000, weight 2.0
}
