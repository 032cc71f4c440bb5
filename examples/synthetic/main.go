// Command synthetic is a synthetic-model benchmark in the manner of
// Horovod's pytorch_synthetic_benchmark: it trains a model that exists only
// as a list of parameter shapes, with the DistributedOptimizer, and measures
// how fast steps go and how much of the gradient communication hides behind
// the backward pass.
//
// Usage:
//
//	synthetic [-model resnet50|vgg16 | -shapes FILE] [-compute-ms 100] [-warmup 3]
//	          [-batches-per-iter 5] [-iterations 5] [-part-steps 10] [-batch-size 32]
//
//	scripts/mpirun.sh 2 bin/synthetic        # 2 ranks (binary built with -tags mpi)
//	go run ./examples/synthetic              # one process
//
// A step is a backward pass and an optimizer step. Backward visits the
// parameters in reverse file order; for each it does real arithmetic over
// the gradient, in an amount proportional to the parameter's size (sweeps
// calibrated at start so that the whole backward takes -compute-ms on this
// machine with every rank computing), then hands the gradient to the
// DistributedOptimizer, which starts its allreduce at once. The optimizer
// step (plain SGD) waits for the reductions and updates the parameters.
//
// After warm-up steps, the benchmark times -iterations of -batches-per-iter
// steps, then -part-steps steps of each part of a step alone: backward
// compute with no communication, communication with no compute (every
// gradient handed over at once, then waited for), and the parameter update.
// Rank 0 prints key=value lines: steps per second per rank
// (rank.N.steps_per_s) and in total (steps_per_s_total, with samples per
// second at -batch-size samples a step), the median step time and the median
// times of the parts (step_ms, compute_ms, comm_ms, update_ms), and the
// overlap achieved:
//
//	hidden_ms = compute_ms + comm_ms + update_ms - step_ms
//	overlap   = hidden_ms / min(compute_ms, comm_ms)
//
// the share of the overlap that was possible (1 when communication hides
// entirely behind compute or the other way round, 0 when nothing overlaps,
// negative when a step is slower than its parts one after the other; 0
// with -compute-ms 0). reduced_in_backward is the mean share of gradients
// whose allreduce had completed when the last layer's compute ended, and
// first_reduced_early the share of steps in which the first gradient's had.
//
// Overlap needs a spare core: the runtime's background goroutine and MPI
// copy and reduce on the CPU, and every cycle in which gradients are ready
// is a rendezvous of the ranks' loops. With as many busy ranks as cores,
// communication during backward takes CPU from the compute, and a step can
// be slower than its parts in sequence; a longer HOROVOD_CYCLE_TIME means
// fewer rendezvous.
//
// Configuration of the runtime (fusion threshold, cycle time, ...) comes
// from the HOROVOD_* environment variables.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm"
)

// options are the command-line settings.
type options struct {
	model      string  // built-in shapes file, when shapes is empty
	shapes     string  // path of a shapes file
	computeMS  float64 // backward compute per step, measured alone
	warmup     int     // untimed steps
	batches    int     // steps per timed iteration
	iterations int     // timed iterations
	partSteps  int     // steps of each part measured alone; 0 skips them
	batchSize  int     // samples per step and rank, for samples/s only
	lr         float64 // SGD learning rate
}

func parse(args []string) (options, error) {
	var o options
	fs := pflag.NewFlagSet("synthetic", pflag.ContinueOnError)
	fs.StringVar(&o.model, "model", "resnet50", "built-in model: resnet50 or vgg16")
	fs.StringVar(&o.shapes, "shapes", "", "shapes file (name<TAB>dims, e.g. 64x3x7x7; overrides -model)")
	fs.Float64Var(&o.computeMS, "compute-ms", 100, "backward compute per step in milliseconds, split over the layers by size")
	fs.IntVar(&o.warmup, "warmup", 3, "warm-up steps before timing")
	fs.IntVar(&o.batches, "batches-per-iter", 5, "steps per timed iteration")
	fs.IntVar(&o.iterations, "iterations", 5, "timed iterations")
	fs.IntVar(&o.partSteps, "part-steps", 10, "steps of compute alone and of communication alone (0: skip)")
	fs.IntVar(&o.batchSize, "batch-size", 32, "samples a step stands for on each rank (for samples/s only)")
	fs.Float64Var(&o.lr, "lr", 0.01, "SGD learning rate")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.computeMS < 0:
		return o, errors.New("synthetic: -compute-ms must be >= 0")
	case o.warmup < 0 || o.partSteps < 0:
		return o, errors.New("synthetic: -warmup and -part-steps must be >= 0")
	case o.batches < 1 || o.iterations < 1 || o.batchSize < 1:
		return o, errors.New("synthetic: -batches-per-iter, -iterations and -batch-size must be positive")
	case fs.NArg() > 0:
		return o, fmt.Errorf("synthetic: unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func main() {
	o, err := parse(os.Args[1:])
	if err == nil {
		err = start(hvd.Default())
		if err == nil {
			_, err = run(context.Background(), o, hvd.Default(), os.Stdout)
			if serr := hvd.Shutdown(); err == nil {
				err = serr
			}
		}
	}
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// start initialises r: over MPI when the binary is built with it (run it
// under mpirun or gohorovodrun for several ranks), else as a single rank.
func start(r *hvd.Runtime) error {
	if hvd.MPIBuilt() {
		return r.Init()
	}
	return r.Init(hvd.WithCommunicator(comm.NewGroup(1)[0]))
}
