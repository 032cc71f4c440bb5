package checkpoint

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// TestResumeAtAnotherSize writes a checkpoint at 4 ranks in the middle of
// an epoch (after steps that processed part of it; the steps after the
// checkpoint are lost with the job), then resumes it at 2 and at 3 ranks
// and trains to the epoch's end: the samples before the checkpoint and
// those dealt after it are the epoch's, each exactly once.
func TestResumeAtAnotherSize(t *testing.T) {
	const n, before = 50, 3 // samples; steps before the checkpoint
	dir := t.TempDir()
	var mu sync.Mutex
	var done []int // processed before the checkpoint, by every rank
	onRanks(t, 4, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 4, n, 2)
		tr.sampler.SetEpoch(1)
		c, err := New(dir, tr.state, Runtime(r))
		if err != nil {
			return err
		}
		for range before {
			b, err := tr.train()
			if err != nil {
				return err
			}
			mu.Lock()
			done = append(done, b...)
			mu.Unlock()
		}
		if err := c.Save(bg, tr.step); err != nil {
			return err
		}
		if _, err := tr.train(); err != nil { // lost: the job dies here
			return err
		}
		return c.Close(bg)
	})
	if len(done) != 4*3*before {
		t.Fatalf("%d samples before the checkpoint", len(done))
	}
	for _, size := range []int{2, 3} {
		t.Run(fmt.Sprint("np", size), func(t *testing.T) {
			seen := slices.Clone(done)
			onRanks(t, size, func(r *hvd.Runtime, rank int) error {
				tr := newTrainee(t, rank, size, n, 2)
				c, err := New(dir, tr.state, Runtime(r))
				if err != nil {
					return err
				}
				info, err := c.Load(bg)
				if err != nil {
					return err
				}
				if info.Step != before || tr.sampler.Epoch() != 1 || tr.sampler.Processed() != len(done) {
					return fmt.Errorf("resumed at step %d, epoch %d, position %d", info.Step, tr.sampler.Epoch(), tr.sampler.Processed())
				}
				for _, b := range tr.sampler.Batches() {
					mu.Lock()
					seen = append(seen, b...)
					mu.Unlock()
					tr.sampler.Record()
				}
				return c.Close(bg)
			})
			slices.Sort(seen)
			for i, s := range seen {
				if s != i {
					t.Fatalf("at %d ranks the epoch's samples are %v: not each of [0, %d) once", size, seen, n)
				}
			}
			if len(seen) != n {
				t.Fatalf("at %d ranks %d samples, want %d", size, len(seen), n)
			}
		})
	}
}
