package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gohorovod/gohorovod/examples/internal/mnist"
	"github.com/gohorovod/gohorovod/internal/mlp"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/elastic"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// progress is the part of the elastic state that is not the model: where
// the group is in the training, committed and synced with the model and
// the sampler.
type progress struct {
	Epoch int // the current epoch
	Step  int // steps taken since the start of training: a commit follows every --commit-every-th
	// The current epoch's training loss summed over the group's samples
	// up to the last fold (done before each commit), and how many samples
	// that is: the epoch's position at the fold.
	LossSum, LossCount float64
	// Consulted: the checkpoint directory was read (with --checkpoint-dir),
	// so that only the job's first start resumes from it.
	Consulted bool
}

// errStopped is the error of a loop stopped by the stopAt test hook.
var errStopped = errors.New("mnist: stopped by the test")

// runStateful trains over an elastic.State on the initialised runtime r
// and prints progress to out on rank 0. The training set is dealt by an
// elastic.Sampler; the model with its optimizer, the sampler and the
// progress are committed every o.every steps and at the end of each
// epoch. With --elastic it runs under elastic.Run, resuming from the last
// commit when a worker fails and following the group when hosts are added
// or removed; it returns elastic.ErrRemoved when the job re-formed without
// this worker. With --checkpoint-dir it resumes from the newest valid
// checkpoint there and writes the commits of every --checkpoint-every-th
// step to it.
func runStateful(ctx context.Context, o options, r *hvd.Runtime, out io.Writer) (res result, err error) {
	train, test, widths, err := load(o)
	if err != nil {
		return res, err
	}
	n := train.Len()
	// No collective may run before elastic.Run (a worker that joins later
	// would never call it): rank 0's weights reach every rank through the
	// state's Sync, not BroadcastParameters.
	model := mlp.New(widths, o.seed)
	coll, err := optim.FromRuntime(r)
	if err != nil {
		return res, err
	}
	opt, _, err := newOptimizer(o, model, coll)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := opt.Close(); err == nil {
			err = cerr
		}
	}()
	sampler, err := elastic.NewSampler(n, o.batch, o.seed, r.Rank(), r.Size())
	if err != nil {
		return res, err
	}
	var prog progress
	objs, err := elastic.NewObjects(map[string]any{"progress": &prog})
	if err != nil {
		return res, err
	}
	oh, err := elastic.NewOptimizer(opt)
	if err != nil {
		return res, err
	}
	sh := elastic.NewSamplerHandler(sampler)
	state, err := elastic.NewState(nil, elastic.Named("progress", objs), elastic.Named("model", oh), elastic.Named("sampler", sh))
	if err != nil {
		return res, err
	}
	// The rate at position pos of the epoch on size ranks: the schedule of
	// the fixed-size run, for the size of the moment.
	lrAt := func(epoch, pos, size int) float64 {
		return o.schedule(size).LR(float64(epoch) + float64(pos)/float64(n))
	}
	// After the group re-forms, the rate is that of the new size (each
	// step recomputes it too; this covers the state in between).
	state.RegisterResetCallback(func() error {
		opt.SetLR(lrAt(prog.Epoch, sampler.Processed(), r.Size()))
		return nil
	})
	ckpt, err := o.checkpointer(ctx, r, state, &prog, out)
	if err != nil {
		return res, err
	}
	if ckpt != nil {
		defer func() {
			if cerr := ckpt.Close(ctx); err == nil {
				err = cerr
			}
		}()
	}
	if r.Rank() == 0 {
		fmt.Fprintf(out, "mnist: %s, %d ranks (round %d), MLP %v, batch %d per rank, lr %g·size, %d epochs, commit every %d steps%s\n",
			o.mode(), r.Size(), r.ElasticRound(), widths, o.batch, o.lr, o.epochs, o.every, o.checkpointText())
	}

	x := make([]float32, o.batch*mnist.Pixels)
	y := make([]uint8, o.batch)
	calls := 0
	trainFn := func(ctx context.Context) error {
		calls++
		// Rank and size are those of the group as it is now: Run re-forms
		// it between calls.
		rank, size := r.Rank(), r.Size()
		coll, err := optim.FromRuntime(r)
		if err != nil {
			return err
		}
		if calls > 1 && rank == 0 {
			fmt.Fprintf(out, "resuming at epoch %d, sample %d of %d: size %d round %d\n",
				prog.Epoch+1, sampler.Processed(), n, size, r.ElasticRound())
		}
		if err := resume(ctx, ckpt, state, &prog, out, rank, o.elastic); err != nil {
			return err
		}
		loss := optim.Metric{Name: "loss"} // this rank's, since the last fold
		// fold adds the group's loss since the last fold to the progress,
		// so that a commit keeps it: the group processed every sample from
		// LossCount to the sampler's position.
		fold := func() error {
			pos := sampler.Processed()
			if float64(pos) == prog.LossCount {
				return nil // the same on every rank
			}
			v, err := optim.AverageMetrics(ctx, coll, &loss)
			if err != nil {
				return err
			}
			prog.LossSum += v[0] * (float64(pos) - prog.LossCount)
			prog.LossCount = float64(pos)
			loss.Reset()
			return nil
		}
		commit := func() error {
			if err := fold(); err != nil {
				return err
			}
			t0 := time.Now()
			err := state.Commit()
			res.commitTime += time.Since(t0)
			res.commits++
			return err
		}
		for prog.Epoch < o.epochs {
			if sampler.Epoch() != prog.Epoch {
				sampler.SetEpoch(prog.Epoch)
			}
			from := sampler.Processed()
			var elapsed time.Duration // in the steps and commits of the epoch since from
			for _, idx := range sampler.Batches() {
				if o.stopAt > 0 && prog.Step == o.stopAt {
					return errStopped
				}
				if o.observe != nil {
					o.observe(rank, prog.Epoch, prog.Step+1, idx)
				}
				t0 := time.Now()
				pos := sampler.Processed()
				// The position after this step: the group takes a batch
				// per rank, or what is left.
				opt.SetLR(lrAt(prog.Epoch, min(n, pos+size*o.batch), size))
				l, err := step(model, opt, train, idx, x, y)
				if err != nil {
					return err
				}
				loss.Add(l, float64(len(idx)))
				sampler.Record()
				prog.Step++
				if prog.Step%o.every == 0 {
					if err := commit(); err != nil {
						return err
					}
				}
				elapsed += time.Since(t0)
			}
			t0 := time.Now()
			if err := fold(); err != nil {
				return err
			}
			elapsed += time.Since(t0)
			correct, count, err := evaluate(model, test, rank, size)
			if err != nil {
				return err
			}
			acc := optim.Metric{Name: "accuracy"}
			acc.Add(float64(correct)/float64(count), float64(count))
			v, err := optim.AverageMetrics(ctx, coll, &acc)
			if err != nil {
				return err
			}
			res.loss, res.accuracy = prog.LossSum/prog.LossCount, v[0]
			if rank == 0 {
				fmt.Fprintf(out, "epoch %d: size %d round %d  loss %.4f  test accuracy %.2f%%  %.1fs  %.0f samples/s  lr %.4g\n",
					prog.Epoch+1, size, r.ElasticRound(), res.loss, 100*res.accuracy, elapsed.Seconds(),
					float64(sampler.Processed()-from)/elapsed.Seconds(), opt.LR())
			}
			// The end of the epoch is committed after its line, so that a
			// failure in the evaluation repeats it rather than skip it.
			t0 = time.Now()
			prog.Epoch++
			prog.LossSum, prog.LossCount = 0, 0
			sampler.SetEpoch(prog.Epoch)
			err = commit()
			elapsed += time.Since(t0)
			res.trainTime += elapsed
			if err != nil {
				return err
			}
		}
		return nil
	}
	logf := func(format string, args ...any) {
		if r.Rank() == 0 {
			fmt.Fprintf(out, "mnist: "+format+"\n", args...)
		}
	}
	if o.elastic {
		err = elastic.Run(ctx, state, trainFn, elastic.WithRuntime(r), elastic.WithLogf(logf))
	} else {
		// Not elastic: there is no Run to sync rank 0's values before the
		// training function (resume syncs them, or loads them).
		state.SetBroadcaster(elastic.FromRuntime(r))
		err = trainFn(ctx)
	}
	if err != nil {
		return res, err
	}
	res.checksum = checksum(model)
	if ckpt != nil && r.Rank() == 0 {
		fmt.Fprintf(out, "parameters: fnv-1a %016x after %d steps\n", res.checksum, prog.Step)
	}
	res.size, res.round = r.Size(), r.ElasticRound()
	if r.Rank() == 0 && res.commits > 0 {
		// A commit is the snapshot plus the host-update check (a broadcast
		// from rank 0); time the snapshot alone, now that training is over.
		const reps = 5
		t0 := time.Now()
		for range reps {
			for _, h := range []elastic.Handler{objs, oh, sh} {
				if err := h.Save(); err != nil {
					return res, err
				}
			}
		}
		snap := time.Since(t0) / reps
		ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
		fmt.Fprintf(out, "commits: %d in %.1f ms (%.2f ms each, the snapshot alone %.2f ms), %.1f%% of training time (%.1fs in steps and commits)\n",
			res.commits, ms(res.commitTime), ms(res.commitTime)/float64(res.commits), ms(snap),
			100*res.commitTime.Seconds()/res.trainTime.Seconds(), res.trainTime.Seconds())
	}
	return res, nil
}

// step takes one training step on the samples idx of set (x and y are
// buffers of a full batch). A rank with no samples left in the epoch's
// last step (idx empty) still steps: its gradient is zero, and the step's
// reductions must be matched on every rank.
func step(model *mlp.MLP, opt *optim.DistributedOptimizer, set *mnist.Set, idx []int, x []float32, y []uint8) (float64, error) {
	if err := opt.ZeroGrad(); err != nil {
		return 0, err
	}
	var l float64
	if n := len(idx); n > 0 {
		for i, s := range idx {
			copy(x[i*mnist.Pixels:(i+1)*mnist.Pixels], set.Image(s))
			y[i] = set.Labels[s]
		}
		if _, err := model.Forward(x, n); err != nil {
			return 0, err
		}
		l, _ = model.Loss(y[:n])
		if err := model.Backward(opt.Ready); err != nil {
			return 0, err
		}
	}
	return l, opt.Step()
}
