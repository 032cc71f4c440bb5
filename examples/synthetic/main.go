package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/optim"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// options are the command-line settings.
type options struct {
	model       string  // built-in shapes file, when shapes is empty
	shapes      string  // path of a shapes file
	computeMS   float64 // backward compute per step, measured alone
	warmup      int     // untimed steps
	batches     int     // steps per timed iteration
	iterations  int     // timed iterations
	partSteps   int     // steps of each part measured alone; 0 skips them
	batchSize   int     // samples per step and rank, for samples/s only
	lr          float64 // SGD learning rate
	bucketBytes int     // the DistributedOptimizer's BucketBytes
	flat        bool    // the DistributedOptimizer's FlatGradients
	tuneMax     int     // warm-up steps at most while autotuning runs
	psgdRank    int     // PowerSGD's rank (0: off)
	psgdStart   int     // PowerSGD's start iteration
	byteGrad    bool    // ByteGrad's 8-bit exchange instead of allreduce
	rankReport  bool    // rank 0 prints every rank's start-up times, pid, goroutines and CPU
	missSteps   int     // steps with a cached and with a fresh-named probe allreduce, each
	holdFile    string  // after the timed steps, go on stepping until this file exists
	holdMax     time.Duration
	clock       clock // start-up times main saw (not a flag)
}

func parse(args []string) (options, error) {
	var o options
	fs := pflag.NewFlagSet("synthetic", pflag.ContinueOnError)
	fs.StringVar(&o.model, "model", "resnet50", "built-in model: resnet50, vgg16 or tiny40 (40 tensors of 256 floats)")
	fs.StringVar(&o.shapes, "shapes", "", "shapes file (name<TAB>dims, e.g. 64x3x7x7; overrides -model)")
	fs.Float64Var(&o.computeMS, "compute-ms", 100, "backward compute per step in milliseconds, split over the layers by size")
	fs.IntVar(&o.warmup, "warmup", 3, "warm-up steps before timing")
	fs.IntVar(&o.tuneMax, "autotune-max-steps", 5000, "with HOROVOD_AUTOTUNE: after --warmup, go on warming up until autotuning has finished, at most this many steps, so that the timed steps run the tuned setting")
	fs.IntVar(&o.batches, "batches-per-iter", 5, "steps per timed iteration")
	fs.IntVar(&o.iterations, "iterations", 5, "timed iterations")
	fs.IntVar(&o.partSteps, "part-steps", 10, "steps of compute alone and of communication alone (0: skip)")
	fs.IntVar(&o.batchSize, "batch-size", 32, "samples a step stands for on each rank (for samples/s only)")
	fs.Float64Var(&o.lr, "lr", 0.01, "SGD learning rate")
	fs.IntVar(&o.bucketBytes, "bucket-bytes", optim.DefaultBucketBytes, "gradients per reduction bucket, in bytes (0: one bucket per gradient)")
	fs.BoolVar(&o.flat, "flat-gradients", true, "hold the gradients in one flat buffer that the runtime reduces in place")
	fs.IntVar(&o.psgdRank, "powersgd-rank", 0, "communicate the gradients with PowerSGD at this rank (0: plain allreduce)")
	fs.IntVar(&o.psgdStart, "powersgd-start", 0, "with -powersgd-rank: steps of plain allreduce before PowerSGD starts (warm-up steps count)")
	fs.BoolVar(&o.byteGrad, "bytegrad", false, "communicate the gradients with ByteGrad (8 bits per value, alltoall then allgather) instead of allreduce")
	fs.BoolVar(&o.rankReport, "rank-report", false, "rank 0 prints, for every rank, its pid, when it started, entered and left hvd.Init and finished its first step (unix µs), its goroutines and its CPU time in the timed steps (rank.R.*), and the CPU per step and rank")
	fs.IntVar(&o.missSteps, "miss-steps", 0, "after the timed steps, time this many steps that add a small allreduce under a cached name and as many under a fresh name each (a negotiation miss): probe_cached_step_ms, probe_miss_step_ms")
	fs.StringVar(&o.holdFile, "hold-file", "", "after the timed steps, rank 0 prints hold=begin and the ranks go on stepping until this file exists (or -hold-max passes), for an observer to sample them")
	fs.DurationVar(&o.holdMax, "hold-max", time.Minute, "with -hold-file: the longest hold")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.computeMS < 0:
		return o, errors.New("synthetic: -compute-ms must be >= 0")
	case o.warmup < 0 || o.partSteps < 0 || o.missSteps < 0:
		return o, errors.New("synthetic: -warmup, -part-steps and -miss-steps must be >= 0")
	case o.psgdRank < 0 || o.psgdStart < 0:
		return o, errors.New("synthetic: -powersgd-rank and -powersgd-start must be >= 0")
	case o.byteGrad && o.psgdRank > 0:
		return o, errors.New("synthetic: -bytegrad and -powersgd-rank are two gradient compressions: choose one")
	case o.bucketBytes < 0:
		return o, errors.New("synthetic: -bucket-bytes must be >= 0")
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
		o.clock.started, o.clock.initStart = mainStarted, time.Now()
		err = hvd.Init() // over MPI under mpirun or gohorovodrun, else one rank
		o.clock.initEnd = time.Now()
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
