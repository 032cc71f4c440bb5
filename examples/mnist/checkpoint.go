package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gohorovod/gohorovod/optim/checkpoint"
	"github.com/gohorovod/gohorovod/optim/elastic"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

// stateful reports whether training runs over an elastic.State: with
// --elastic, or with --checkpoint-dir.
func (o options) stateful() bool { return o.elastic || o.ckptDir != "" }

// mode names the training mode in the first line printed.
func (o options) mode() string {
	if o.elastic {
		return "elastic"
	}
	return "resumable"
}

// checkpointText describes the checkpoints in the first line printed.
func (o options) checkpointText() string {
	if o.ckptDir == "" {
		return ""
	}
	return fmt.Sprintf(", checkpoint every %d steps to %s", o.ckptEvery, o.ckptDir)
}

// checkCheckpoint checks the checkpoint flags; without --elastic, commits
// are only there to be written, so they come every --checkpoint-every
// steps.
func (o *options) checkCheckpoint() error {
	if o.ckptDir == "" {
		return nil
	}
	switch {
	case o.ckptEvery < 1:
		return fmt.Errorf("mnist: --checkpoint-every %d must be positive", o.ckptEvery)
	case o.elastic && o.ckptEvery%o.every != 0:
		return fmt.Errorf("mnist: --checkpoint-every %d must be a multiple of --commit-every %d: the checkpoints are commits", o.ckptEvery, o.every)
	case o.psgdRank > 0:
		return errors.New("mnist: --powersgd-rank does not work with --checkpoint-dir: its error feedback is not in the checkpoint")
	case o.norm != "none":
		return errors.New("mnist: --batchnorm does not work with --checkpoint-dir: the running statistics are not in the checkpoint")
	case o.localSGD():
		return errors.New("mnist: --local-sgd-start does not work with --checkpoint-dir")
	}
	if !o.elastic {
		o.every = o.ckptEvery
	}
	return nil
}

// checkpointer returns the checkpointer of state in --checkpoint-dir, which
// writes the commits of every --checkpoint-every-th step, reporting each
// write and each damaged checkpoint passed over to out (rank 0); nil
// without --checkpoint-dir.
func (o options) checkpointer(ctx context.Context, r *hvd.Runtime, state *elastic.State, prog *progress, out io.Writer) (*checkpoint.Checkpointer, error) {
	if o.ckptDir == "" {
		return nil, nil
	}
	logf := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	c, err := checkpoint.New(o.ckptDir, state, checkpoint.Runtime(r), checkpoint.Logf(logf))
	if err != nil {
		return nil, err
	}
	if err := c.PersistCommits(ctx, int64(o.ckptEvery), func() int64 { return int64(prog.Step) }); err != nil {
		return nil, err
	}
	return c, nil
}

// resume, the first time the job trains (prog.Consulted is false on every
// rank alike: it is part of the synced state), loads the newest valid
// checkpoint of ckpt on every rank and prints "resumed from step N (epoch
// E)" on rank 0; without a checkpoint, training starts from rank 0's
// values (synced here when not elastic: elastic.Run has synced them).
// Without ckpt it does nothing but, when not elastic, sync.
func resume(ctx context.Context, ckpt *checkpoint.Checkpointer, state *elastic.State, prog *progress, out io.Writer, rank int, elasticRun bool) error {
	if prog.Consulted {
		return nil
	}
	var err error
	var info checkpoint.Info
	if ckpt != nil {
		info, err = ckpt.Load(ctx)
	} else {
		err = checkpoint.ErrNoCheckpoint
	}
	switch {
	case err == nil:
		if rank == 0 {
			fmt.Fprintf(out, "resumed from step %d (epoch %d) of %s\n", info.Step, prog.Epoch+1, info.Path)
		}
	case !errors.Is(err, checkpoint.ErrNoCheckpoint):
		return err
	case !elasticRun:
		if err := state.Sync(ctx); err != nil {
			return err
		}
	}
	prog.Consulted = true
	return nil
}
