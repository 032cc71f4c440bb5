//go:build (mpi && cgo) || gloo

// Checkpoints across processes (scripts/mpitest.sh runs this package at np
// 2, 3 and 4): one Runtime for the whole test binary, over MPI under
// mpirun (built with the "mpi" tag), or over the embedded transport under
// gohorovodrun --gloo (the "gloo" tag). Rank 0 alone reads and writes the
// files; every rank ends with the same state.

package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/jobtest"
	"github.com/gohorovod/gohorovod/optim/elastic"
	hvd "github.com/gohorovod/gohorovod/runtime"
)

var mpiRT = new(hvd.Runtime)

func TestMain(m *testing.M) {
	jobtest.Main(m, mpiRT, "checkpoint multi-process tests")
}

// jobDir returns a directory that rank 0 created for the test, the same
// path on every rank, removed at the end on rank 0.
func jobDir(ctx context.Context, t *testing.T) string {
	t.Helper()
	var name []byte
	if mpiRT.Rank() == 0 {
		d, err := os.MkdirTemp("", "ghv-ckpt-mpi")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		name = []byte(d)
	}
	got, err := elastic.FromRuntime(mpiRT).BroadcastBytes(ctx, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}

// TestMPISaveLoad: every process saves at step 4 (rank 0 writes), trains
// on, and loads: each is back at its own step-4 state bit for bit, the
// sampler at the group's position; then rank 0 truncates the newest
// checkpoint and every rank falls back to the one before, reported by
// name on every rank.
func TestMPISaveLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := jobDir(ctx, t)
	rank, size := mpiRT.Rank(), mpiRT.Size()
	tr := newTrainee(t, rank, size, 40*size, 4)
	c, err := New(dir, tr.state, Runtime(mpiRT))
	if err != nil {
		t.Fatal(err)
	}
	imgs := map[int64]image{}
	for _, s := range []int64{4, 6} {
		for tr.step < s {
			if _, err := tr.train(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		imgs[s] = tr.image(t)
	}
	if _, err := tr.train(); err != nil {
		t.Fatal(err)
	}
	info, err := c.Load(ctx)
	if err != nil || info.Step != 6 || tr.image(t).String() != imgs[6].String() {
		t.Fatalf("rank %d: loaded step %d (%v): %v, saved %v", rank, info.Step, err, tr.image(t), imgs[6])
	}
	if rank == 0 {
		damageFile(t, filepath.Join(dir, FileName(6)), damages[0].damage)
	}
	info, err = c.Load(ctx)
	if err != nil || info.Step != 4 || len(info.Skipped) != 1 || !strings.Contains(info.Skipped[0], FileName(6)+" is damaged: truncated") {
		t.Fatalf("rank %d: after the damage, loaded step %d, skipped %q: %v", rank, info.Step, info.Skipped, err)
	}
	if got := tr.image(t); got.String() != imgs[4].String() {
		t.Fatalf("rank %d: loaded %v, saved %v", rank, got, imgs[4])
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMPIMismatch: a checkpoint of a 4-element weight loaded into a model
// whose weight has 6 is an error on every process that names the
// parameter.
func TestMPIMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := jobDir(ctx, t)
	rank, size := mpiRT.Rank(), mpiRT.Size()
	for i, wn := range []int{4, 6} {
		tr := newTrainee(t, rank, size, 40*size, wn)
		c, err := New(dir, tr.state, Runtime(mpiRT))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			err = c.Save(ctx, 1)
		} else if _, err = c.Load(ctx); err == nil || !strings.Contains(err.Error(), `parameter "fc.w" has 32 bytes in the state, 48 in this model`) {
			t.Fatalf("rank %d: load into another model: %v", rank, err)
		} else {
			err = nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
