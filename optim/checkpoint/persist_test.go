package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// TestPersistCommits commits every 10 steps on two ranks and persists
// the commits of every 20th: the checkpoints are those of steps 20 and 40,
// and the last loads as the state of step 40.
func TestPersistCommits(t *testing.T) {
	dir := t.TempDir()
	at40 := make([]image, 2)
	onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 2, 400, 3)
		c, err := New(dir, tr.state, Runtime(r))
		if err != nil {
			return err
		}
		if err := c.PersistCommits(bg, 20, func() int64 { return tr.step }); err != nil {
			return err
		}
		for tr.step < 50 {
			if _, err := tr.train(); err != nil {
				return err
			}
			if tr.step%10 == 0 {
				if err := tr.state.Commit(); err != nil {
					return err
				}
			}
			if tr.step == 40 {
				at40[rank] = tr.image(t)
			}
		}
		info, err := c.Load(bg)
		if err != nil || info.Step != 40 || tr.image(t).String() != at40[rank].String() {
			return fmt.Errorf("loaded step %d (%v): %v, at step 40 %v", info.Step, err, tr.image(t), at40[rank])
		}
		return c.Close(bg)
	})
	assertOnly(t, dir, FileName(20), FileName(40))
}

// TestResetForgetsUnflushedSave: after an elastic group re-forms (the
// state's Reset), a Save that was not flushed is forgotten on every rank,
// so that a rank that joins (which never saw it) and the old ranks make
// the same collective calls: the next Save and Close agree, and the old
// rank 0's write is complete.
func TestResetForgetsUnflushedSave(t *testing.T) {
	dir := t.TempDir()
	onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 2, 40, 3)
		c, err := New(dir, tr.state, Runtime(r))
		if err != nil {
			return err
		}
		// Rank 1 plays a worker that joined after the Save.
		if rank == 0 {
			if err := c.Save(bg, 1); err != nil {
				return err
			}
			if err := tr.state.Reset(); err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(dir, FileName(1))); err != nil {
				return fmt.Errorf("the write before the reset is not complete: %v", err)
			}
		}
		if err := c.Save(bg, 2); err != nil {
			return err
		}
		return c.Close(bg)
	})
	assertOnly(t, dir, FileName(1), FileName(2))
}
