package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/optim/elastic"
)

// Save writes the state as the checkpoint of step. It is collective: every
// rank calls it at the same step. First it waits for the previous Save's
// write, if one is in flight, and returns that write's error (a
// *SaveError, on every rank) if it failed, without starting another. Then
// rank 0 snapshots the state (every handler's Encode, in memory) and
// writes the snapshot to a temporary file of the directory, syncs it,
// renames it to FileName(step), syncs the directory and removes the
// checkpoints beyond the newest Keep. In the background (the default)
// Save returns after the snapshot and training goes on while the file is
// written; the next Save, Flush or Close reports the outcome. Call Close
// (or Flush) before the process exits, or the last write may be lost.
func (c *Checkpointer) Save(ctx context.Context, step int64) error {
	if c.closed {
		return ErrClosed
	}
	if step < 0 {
		return fmt.Errorf("checkpoint: step %d is negative", step)
	}
	if err := c.Flush(ctx); err != nil {
		return err
	}
	c.unsettled, c.pendingStep = true, step
	if c.cfg.rank() == 0 {
		c.start(step)
	}
	if !c.cfg.background {
		return c.Flush(ctx)
	}
	return nil
}

// start snapshots the state and starts writing it (rank 0). A snapshot
// that fails is the write's outcome.
func (c *Checkpointer) start(step int64) {
	done := make(chan error, 1)
	c.done = done
	written := c.cfg.now()
	parts, err := c.state.Encode()
	if err != nil {
		done <- fmt.Errorf("checkpoint: snapshot of step %d: %w", step, err)
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		done <- c.write(step, written, parts)
	}()
}

// write writes one checkpoint and prunes the old ones (on the writing
// goroutine).
func (c *Checkpointer) write(step int64, written time.Time, parts []elastic.Part) error {
	t0 := time.Now()
	path, m, err := write(c.dir, step, written, parts)
	if err != nil {
		return err
	}
	if c.cfg.logf != nil {
		d := time.Since(t0)
		c.cfg.logf("checkpoint: wrote %s (step %d, %d bytes in %.1f ms, %.0f MB/s)",
			path, step, m.Size, float64(d.Microseconds())/1e3, float64(m.Size)/1e6/d.Seconds())
	}
	return prune(c.dir, c.cfg.keep)
}

// Flush waits for the write in flight, if any, and returns its outcome on
// every rank: nil, or a *SaveError with rank 0's message. It is
// collective when a Save has not been flushed yet (every rank knows that
// alike), and does nothing otherwise.
func (c *Checkpointer) Flush(ctx context.Context) error {
	if !c.unsettled {
		return nil
	}
	var mine error
	msg := []byte{}
	if c.done != nil {
		select {
		case mine = <-c.done:
			c.done = nil
		case <-ctx.Done():
			return fmt.Errorf("checkpoint: waiting for the write of step %d: %w", c.pendingStep, ctx.Err())
		}
		if mine != nil {
			msg = []byte(mine.Error())
		}
	}
	c.unsettled = false
	got, err := c.cfg.b.BroadcastBytes(ctx, msg, 0)
	if err != nil {
		return fmt.Errorf("checkpoint: agreeing on the write of step %d: %w", c.pendingStep, errors.Join(err, mine))
	}
	if len(got) > 0 {
		return &SaveError{Step: c.pendingStep, Msg: string(got), Err: mine}
	}
	return nil
}

// Close flushes (collective, as Flush) and waits for the writing goroutine;
// the Checkpointer cannot be used afterwards. It returns the last write's
// outcome.
func (c *Checkpointer) Close(ctx context.Context) error {
	if c.closed {
		return nil
	}
	err := c.Flush(ctx)
	c.closed = true
	c.wg.Wait()
	return err
}

// settle is the reset callback: after an elastic group re-forms, ranks
// that were not in the old group know nothing of its last Save, so every
// rank forgets it; the old rank 0 waits for its write and logs a failure.
func (c *Checkpointer) settle() error {
	if c.done != nil {
		if err := <-c.done; err != nil && c.cfg.logf != nil {
			c.cfg.logf("checkpoint: the write of step %d failed before the group re-formed: %v", c.pendingStep, err)
		}
		c.done = nil
	}
	c.unsettled = false
	return nil
}

// PersistCommits makes every Commit of the state whose step (as step
// returns it, the same on every rank: a synced object's value) is a
// multiple of every also Save a checkpoint of that step, so that an
// elastic job that loses every worker still resumes. Make every a multiple
// of the commit period: a job that commits every 10 steps and persists
// every 100 writes every tenth commit. Save's error (the previous write's)
// is Commit's, on every rank. Commits persist until the Checkpointer is
// closed.
func (c *Checkpointer) PersistCommits(ctx context.Context, every int64, step func() int64) error {
	if every < 1 {
		return fmt.Errorf("checkpoint: PersistCommits every %d: must be positive", every)
	}
	if step == nil {
		return errors.New("checkpoint: PersistCommits without a step")
	}
	c.state.OnCommit(func() error {
		if s := step(); !c.closed && s%every == 0 {
			return c.Save(ctx, s)
		}
		return nil
	})
	return nil
}
