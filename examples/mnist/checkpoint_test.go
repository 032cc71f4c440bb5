package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/examples/internal/localrun"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// trainStateful runs runStateful with o on n in-memory ranks and returns
// rank 0's output and the ranks' errors joined.
func trainStateful(n int, o options) (string, error) {
	_, outs, err := localrun.Run(n, config.Default(), 5*time.Minute, func(ctx context.Context, r *hvd.Runtime, out io.Writer) (result, error) {
		return runStateful(ctx, o, r, out)
	})
	return outs[0].String(), err
}

// TestResumeAtAnotherSize trains at np 4 (3,000 images, 16 per rank and
// step: 47 steps per epoch, a checkpoint every 5 steps) and stops it at
// step 72, in the second epoch, two steps after the checkpoint of step
// 70; then resumes that checkpoint at np 3 and at np 2: each resumes from
// step 70 (epoch 2) and trains the rest of the epoch, and the samples of
// epoch 2 up to step 70 with those trained after the resume are the
// epoch's 3,000, each once.
func TestResumeAtAnotherSize(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	o, err := parse([]string{"--checkpoint-dir", t.TempDir(), "--epochs", "2", "--train-limit", "3000", "--batch", "16", "--checkpoint-every", "5"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var before []int // epoch 2's samples up to the checkpoint
	o.stopAt = 72
	o.observe = func(_, epoch, step int, idx []int) {
		mu.Lock()
		defer mu.Unlock()
		if epoch == 1 && step <= 70 {
			before = append(before, idx...)
		}
	}
	if out, err := trainStateful(4, o); !errors.Is(err, errStopped) {
		t.Fatalf("np 4: %v\n%s", err, out)
	}
	for _, n := range []int{3, 2} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			oo := o
			oo.ckptDir = t.TempDir()
			copyCheckpoints(t, o.ckptDir, oo.ckptDir)
			seen := slices.Clone(before)
			oo.stopAt = 0
			oo.observe = func(_, epoch, _ int, idx []int) {
				mu.Lock()
				defer mu.Unlock()
				if epoch != 1 {
					t.Errorf("trained in epoch %d after resuming in epoch 2", epoch+1)
				}
				seen = append(seen, idx...)
			}
			out, err := trainStateful(n, oo)
			if err != nil {
				t.Fatalf("np %d: %v\n%s", n, err, out)
			}
			if !strings.Contains(out, "resumed from step 70 (epoch 2)") {
				t.Fatalf("np %d did not resume from step 70:\n%s", n, out)
			}
			slices.Sort(seen)
			if len(seen) != 3000 {
				t.Fatalf("np %d: epoch 2 trained %d samples, want 3000", n, len(seen))
			}
			for i, s := range seen {
				if s != i {
					t.Fatalf("np %d: sample %d of epoch 2 is %d: a sample twice or skipped", n, i, s)
				}
			}
		})
	}
}

// copyCheckpoints copies the checkpoint files of from into to.
func copyCheckpoints(t *testing.T, from, to string) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(from, "ckpt-*"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no checkpoints in %s (%v)", from, err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(n)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
