package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/gohorovod/gohorovod/optim/checkpoint"
	"github.com/gohorovod/gohorovod/optim/elastic"
)

// errStopped is the error of a run stopped by the stopAt test hook.
var errStopped = errors.New("mnistcnn: stopped by the test")

// checkpointText describes the checkpoints in the first line printed.
func (o options) checkpointText() string {
	if o.ckptDir == "" {
		return ""
	}
	return fmt.Sprintf(", checkpoint every %d steps to %s", o.ckptEvery, o.ckptDir)
}

// progress is where training is, written with the variables and the
// sampler.
type progress struct {
	Epoch, Step int
}

// resumable is the training state of a run with --checkpoint-dir: the
// trainer's variables, the sampler and the progress in one elastic.State.
type resumable struct {
	sampler *elastic.Sampler
	prog    progress
	model   elastic.Codec
	state   *elastic.State
	ckpt    *checkpoint.Checkpointer
}

// newResumable builds the state (the trainer's variables exist once it is
// prepared on a first batch) and its checkpointer, and loads the newest
// valid checkpoint (printing "resumed from step N (epoch E)" on rank 0), or
// without one gives every rank rank 0's initial variables.
func (j *job) newResumable(ctx context.Context) (*resumable, error) {
	rs := &resumable{}
	var err error
	if rs.sampler, err = elastic.NewSampler(j.n, j.o.batch, j.o.seed, j.r.Rank(), j.r.Size()); err != nil {
		return nil, err
	}
	first := make([]int, j.o.batch)
	for i := range first {
		first[i] = i % j.n
	}
	x, y := j.trainSet.batch(first)
	if err := j.tr.Prepare([]*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
		return nil, err
	}
	h, err := j.tr.ElasticHandler()
	if err != nil {
		return nil, err
	}
	rs.model = h.(elastic.Codec)
	objs, err := elastic.NewObjects(map[string]any{"progress": &rs.prog})
	if err != nil {
		return nil, err
	}
	if rs.state, err = elastic.NewState(elastic.FromRuntime(j.r), elastic.Named("model", h),
		elastic.Named("sampler", elastic.NewSamplerHandler(rs.sampler)), elastic.Named("progress", objs)); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(j.out, format+"\n", args...) }
	if rs.ckpt, err = checkpoint.New(j.o.ckptDir, rs.state, checkpoint.Runtime(j.r), checkpoint.Logf(logf)); err != nil {
		return nil, err
	}
	info, err := rs.ckpt.Load(ctx)
	switch {
	case err == nil:
		if j.r.Rank() == 0 {
			fmt.Fprintf(j.out, "resumed from step %d (epoch %d) of %s\n", info.Step, rs.prog.Epoch+1, info.Path)
		}
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		err = rs.state.Sync(ctx)
	}
	if err != nil {
		rs.ckpt.Close(ctx)
		return nil, err
	}
	return rs, nil
}

// trainResumable trains from where the newest checkpoint left off, writing
// one every --checkpoint-every steps. The training set is dealt by an
// elastic.Sampler, so a checkpoint written at one number of ranks resumes
// at another; each epoch trains its full rounds of a batch per rank (the
// rest of the epoch, less than a round, is dropped, as without
// checkpoints). Rank 0 ends with the hash of the variables.
func (j *job) trainResumable(ctx context.Context) (err error) {
	rs, err := j.newResumable(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := rs.ckpt.Close(ctx); err == nil {
			err = cerr
		}
	}()
	size := j.r.Size()
	for rs.prog.Epoch < j.o.epochs {
		if rs.sampler.Epoch() != rs.prog.Epoch {
			rs.sampler.SetEpoch(rs.prog.Epoch)
		}
		m := j.startEpoch()
		batches := rs.sampler.Batches()
		batches = batches[:min(len(batches), rs.sampler.Remaining()/(j.o.batch*size))]
		for _, idx := range batches {
			if err := j.resumableStep(ctx, rs, idx, m); err != nil {
				return err
			}
		}
		if err := j.endEpoch(ctx, rs.prog.Epoch, len(batches), m); err != nil {
			return err
		}
		rs.prog.Epoch++
		rs.sampler.SetEpoch(rs.prog.Epoch)
	}
	b, err := rs.model.Encode()
	if err != nil {
		return err
	}
	if j.r.Rank() == 0 {
		h := fnv.New64a()
		h.Write(b)
		fmt.Fprintf(j.out, "variables: fnv-1a %016x after %d steps\n", h.Sum64(), rs.prog.Step)
	}
	return nil
}

// resumableStep takes one step on idx at the rate of the position it
// starts from (as the plain loop does: the cosine's zero, at the end of
// the last epoch, is never a step's rate), and writes a checkpoint when
// one is due.
func (j *job) resumableStep(ctx context.Context, rs *resumable, idx []int, m *epochMeter) error {
	if j.o.stopAt > 0 && rs.prog.Step == j.o.stopAt {
		return errStopped
	}
	pos := rs.sampler.Processed()
	if err := j.tr.SetLR(j.lr.LR(float64(rs.prog.Epoch) + float64(pos)/float64(j.n))); err != nil {
		return err
	}
	x, y := j.trainSet.batch(idx)
	l, err := j.tr.TrainStep(ctx, []*tensors.Tensor{x}, []*tensors.Tensor{y})
	if err != nil {
		return fmt.Errorf("epoch %d step %d: %w", rs.prog.Epoch, rs.prog.Step, err)
	}
	m.loss.Add(l, 1)
	rs.sampler.Record()
	rs.prog.Step++
	if rs.prog.Step%j.o.ckptEvery == 0 {
		return rs.ckpt.Save(ctx, int64(rs.prog.Step))
	}
	return nil
}
