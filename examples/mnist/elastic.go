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
	"github.com/gohorovod/gohorovod/optim/checkpoint"
	"github.com/gohorovod/gohorovod/optim/elastic"
	"github.com/gohorovod/gohorovod/optim/preempt"
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
	s, err := newStateful(ctx, o, r, out)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := s.close(ctx); err == nil {
			err = cerr
		}
	}()
	if r.Rank() == 0 {
		fmt.Fprintf(out, "mnist: %s, %d ranks (round %d), MLP %v, batch %d per rank, lr %g·size, %d epochs, commit every %d steps%s\n",
			o.mode(), r.Size(), r.ElasticRound(), s.widths, o.batch, o.lr, o.epochs, o.every, o.checkpointText())
	}
	if o.elastic {
		logf := func(format string, args ...any) {
			if r.Rank() == 0 {
				fmt.Fprintf(out, "mnist: "+format+"\n", args...)
			}
		}
		err = elastic.Run(ctx, s.state, s.trainFn, elastic.WithRuntime(r), elastic.WithLogf(logf))
	} else {
		// Not elastic: there is no Run to sync rank 0's values before the
		// training function (resume syncs them, or loads them).
		s.state.SetBroadcaster(elastic.FromRuntime(r))
		err = s.trainFn(ctx)
	}
	if err != nil {
		return s.res, err
	}
	return s.finish()
}

// stateful is one rank's training over an elastic.State.
type stateful struct {
	o           options
	r           *hvd.Runtime
	out         io.Writer
	train, test *mnist.Set
	widths      []int
	model       *mlp.MLP
	opt         *optim.DistributedOptimizer
	sampler     *elastic.Sampler
	prog        progress
	handlers    []elastic.Handler // the state's, to time a snapshot
	state       *elastic.State
	ckpt        *checkpoint.Checkpointer // nil without --checkpoint-dir
	watch       *preempt.Watcher         // with --checkpoint-dir: stop when told to
	x           []float32                // a batch's images
	y           []uint8                  // and labels
	calls       int                      // of trainFn
	res         result

	// Of the current call of trainFn: the collectives of the group as it
	// is now, and this rank's loss since the last fold.
	coll optim.Collectives
	loss optim.Metric
}

// newStateful builds the model, its optimizer, the sampler and the state
// (and the checkpointer, with --checkpoint-dir). No collective may run
// before elastic.Run (a worker that joins later would never call it):
// rank 0's weights reach every rank through the state's Sync, or a
// checkpoint, not BroadcastParameters.
func newStateful(ctx context.Context, o options, r *hvd.Runtime, out io.Writer) (s *stateful, err error) {
	s = &stateful{o: o, r: r, out: out, x: make([]float32, o.batch*mnist.Pixels), y: make([]uint8, o.batch)}
	if s.train, s.test, s.widths, err = load(o); err != nil {
		return nil, err
	}
	s.model = mlp.New(s.widths, o.seed)
	coll, err := optim.FromRuntime(r)
	if err != nil {
		return nil, err
	}
	if s.opt, _, err = newOptimizer(o, s.model, coll); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.opt.Close()
		}
	}()
	if s.sampler, err = elastic.NewSampler(s.train.Len(), o.batch, o.seed, r.Rank(), r.Size()); err != nil {
		return nil, err
	}
	objs, err := elastic.NewObjects(map[string]any{"progress": &s.prog})
	if err != nil {
		return nil, err
	}
	oh, err := elastic.NewOptimizer(s.opt)
	if err != nil {
		return nil, err
	}
	sh := elastic.NewSamplerHandler(s.sampler)
	s.handlers = []elastic.Handler{objs, oh, sh}
	if s.state, err = elastic.NewState(nil, elastic.Named("progress", objs), elastic.Named("model", oh), elastic.Named("sampler", sh)); err != nil {
		return nil, err
	}
	// After the group re-forms, the rate is that of the new size (each
	// step recomputes it too; this covers the state in between).
	s.state.RegisterResetCallback(func() error {
		s.opt.SetLR(s.lrAt(s.prog.Epoch, s.sampler.Processed(), r.Size()))
		return nil
	})
	if s.ckpt, err = o.checkpointer(ctx, r, s.state, &s.prog, out); err != nil {
		return nil, err
	}
	if s.ckpt != nil {
		// Told to stop (SIGTERM, SIGUSR1, SIGINT), every rank stops after
		// the same step, with a checkpoint of it.
		if s.watch, err = preempt.Watch(coll, preempt.Options{}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// preempted writes the checkpoint of the step just taken and waits for
// it: the ranks agreed to stop (collective, as Save).
func (s *stateful) preempted(ctx context.Context) error {
	if err := s.fold(ctx); err != nil {
		return err
	}
	if err := s.ckpt.Save(ctx, int64(s.prog.Step)); err != nil {
		return err
	}
	return s.ckpt.Flush(ctx)
}

// close writes the last checkpoint and closes the optimizer.
func (s *stateful) close(ctx context.Context) error {
	var err error
	if s.watch != nil {
		s.watch.Close()
	}
	if s.ckpt != nil {
		err = s.ckpt.Close(ctx)
	}
	if cerr := s.opt.Close(); err == nil {
		err = cerr
	}
	return err
}

// lrAt is the rate at position pos of the epoch on size ranks: the
// schedule of the fixed-size run, for the size of the moment.
func (s *stateful) lrAt(epoch, pos, size int) float64 {
	return s.o.schedule(size).LR(float64(epoch) + float64(pos)/float64(s.train.Len()))
}

// trainFn is the training function: elastic.Run calls it again after the
// group re-forms.
func (s *stateful) trainFn(ctx context.Context) error {
	s.calls++
	// Rank and size are those of the group as it is now: Run re-forms it
	// between calls.
	rank, size := s.r.Rank(), s.r.Size()
	var err error
	if s.coll, err = optim.FromRuntime(s.r); err != nil {
		return err
	}
	if s.calls > 1 && rank == 0 {
		fmt.Fprintf(s.out, "resuming at epoch %d, sample %d of %d: size %d round %d\n",
			s.prog.Epoch+1, s.sampler.Processed(), s.train.Len(), size, s.r.ElasticRound())
	}
	if err := resume(ctx, s.ckpt, s.state, &s.prog, s.out, rank, s.o.elastic); err != nil {
		return err
	}
	s.loss = optim.Metric{Name: "loss"}
	for s.prog.Epoch < s.o.epochs {
		if err := s.epoch(ctx, rank, size); err != nil {
			return err
		}
	}
	return nil
}

// epoch trains the rest of the current epoch, evaluates, prints its line
// and commits its end.
func (s *stateful) epoch(ctx context.Context, rank, size int) error {
	if s.sampler.Epoch() != s.prog.Epoch {
		s.sampler.SetEpoch(s.prog.Epoch)
	}
	from := s.sampler.Processed()
	var elapsed time.Duration // in the steps and commits of the epoch since from
	for _, idx := range s.sampler.Batches() {
		if s.o.stopAt > 0 && s.prog.Step == s.o.stopAt {
			return errStopped
		}
		if s.o.observe != nil {
			s.o.observe(rank, s.prog.Epoch, s.prog.Step+1, idx)
		}
		t0 := time.Now()
		// The position after this step: the group takes a batch per rank,
		// or what is left.
		s.opt.SetLR(s.lrAt(s.prog.Epoch, min(s.train.Len(), s.sampler.Processed()+size*s.o.batch), size))
		l, err := step(s.model, s.opt, s.train, idx, s.x, s.y)
		if err != nil {
			return err
		}
		s.loss.Add(l, float64(len(idx)))
		s.sampler.Record()
		s.prog.Step++
		if s.prog.Step%s.o.every == 0 {
			if err := s.commit(ctx); err != nil {
				return err
			}
		}
		if s.watch != nil {
			if err := s.watch.Check(func() error { return s.preempted(ctx) }); err != nil {
				return err
			}
		}
		elapsed += time.Since(t0)
	}
	t0 := time.Now()
	if err := s.fold(ctx); err != nil {
		return err
	}
	elapsed += time.Since(t0)
	if err := s.report(ctx, rank, size, from, elapsed); err != nil {
		return err
	}
	// The end of the epoch is committed after its line, so that a failure
	// in the evaluation repeats it rather than skip it.
	t0 = time.Now()
	s.prog.Epoch++
	s.prog.LossSum, s.prog.LossCount = 0, 0
	s.sampler.SetEpoch(s.prog.Epoch)
	err := s.commit(ctx)
	s.res.trainTime += elapsed + time.Since(t0)
	return err
}

// report evaluates the model and prints the epoch's line on rank 0.
func (s *stateful) report(ctx context.Context, rank, size, from int, elapsed time.Duration) error {
	correct, count, err := evaluate(s.model, s.test, rank, size)
	if err != nil {
		return err
	}
	acc := optim.Metric{Name: "accuracy"}
	acc.Add(float64(correct)/float64(count), float64(count))
	v, err := optim.AverageMetrics(ctx, s.coll, &acc)
	if err != nil {
		return err
	}
	s.res.loss, s.res.accuracy = s.prog.LossSum/s.prog.LossCount, v[0]
	if rank == 0 {
		fmt.Fprintf(s.out, "epoch %d: size %d round %d  loss %.4f  test accuracy %.2f%%  %.1fs  %.0f samples/s  lr %.4g\n",
			s.prog.Epoch+1, size, s.r.ElasticRound(), s.res.loss, 100*s.res.accuracy, elapsed.Seconds(),
			float64(s.sampler.Processed()-from)/elapsed.Seconds(), s.opt.LR())
	}
	return nil
}

// fold adds the group's loss since the last fold to the progress, so that
// a commit keeps it: the group processed every sample from LossCount to
// the sampler's position.
func (s *stateful) fold(ctx context.Context) error {
	pos := s.sampler.Processed()
	if float64(pos) == s.prog.LossCount {
		return nil // the same on every rank
	}
	v, err := optim.AverageMetrics(ctx, s.coll, &s.loss)
	if err != nil {
		return err
	}
	s.prog.LossSum += v[0] * (float64(pos) - s.prog.LossCount)
	s.prog.LossCount = float64(pos)
	s.loss.Reset()
	return nil
}

// commit folds the loss and commits the state (which, with
// --checkpoint-dir, writes the commits of every --checkpoint-every-th
// step).
func (s *stateful) commit(ctx context.Context) error {
	if err := s.fold(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	err := s.state.Commit()
	s.res.commitTime += time.Since(t0)
	s.res.commits++
	return err
}

// finish completes the result and prints, on rank 0, the final
// parameters' hash (with --checkpoint-dir) and the commits' cost.
func (s *stateful) finish() (result, error) {
	res := s.res
	res.checksum = checksum(s.model)
	res.size, res.round = s.r.Size(), s.r.ElasticRound()
	if s.r.Rank() != 0 {
		return res, nil
	}
	if s.ckpt != nil {
		fmt.Fprintf(s.out, "parameters: fnv-1a %016x after %d steps\n", res.checksum, s.prog.Step)
	}
	if res.commits == 0 {
		return res, nil
	}
	// A commit is the snapshot plus the host-update check (a broadcast
	// from rank 0); time the snapshot alone, now that training is over.
	const reps = 5
	t0 := time.Now()
	for range reps {
		for _, h := range s.handlers {
			if err := h.Save(); err != nil {
				return res, err
			}
		}
	}
	snap := time.Since(t0) / reps
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	fmt.Fprintf(s.out, "commits: %d in %.1f ms (%.2f ms each, the snapshot alone %.2f ms), %.1f%% of training time (%.1fs in steps and commits)\n",
		res.commits, ms(res.commitTime), ms(res.commitTime)/float64(res.commits), ms(snap),
		100*res.commitTime.Seconds()/res.trainTime.Seconds(), res.trainTime.Seconds())
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
		fillBatch(set, idx, x, y)
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
