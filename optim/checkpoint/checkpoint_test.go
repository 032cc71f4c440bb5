package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// TestSaveLoad saves at step 4 on three ranks, trains on, and loads: every
// rank is back at step 4 bit for bit (parameters, momentum, step, random
// generator, sampler), and training on from there repeats the same steps.
func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	const n = 3
	saved := make([]image, n)
	after := make([]image, n)
	onRanks(t, n, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, n, 60, 4)
		c, err := New(dir, tr.state, Runtime(r))
		if err != nil {
			return err
		}
		for range 4 {
			if _, err := tr.train(); err != nil {
				return err
			}
		}
		if err := c.Save(bg, tr.step); err != nil {
			return err
		}
		saved[rank] = tr.image(t)
		if _, err := tr.train(); err != nil {
			return err
		}
		after[rank] = tr.image(t)
		if _, err := tr.train(); err != nil {
			return err
		}
		info, err := c.Load(bg)
		if err != nil {
			return err
		}
		if info.Step != 4 || info.Path != filepath.Join(dir, FileName(4)) || len(info.Skipped) != 0 || info.Bytes <= 0 {
			return fmt.Errorf("loaded %+v", info)
		}
		if got := tr.image(t); got.String() != saved[rank].String() {
			return fmt.Errorf("loaded %v, saved %v", got, saved[rank])
		}
		if _, err := tr.train(); err != nil {
			return err
		}
		if got := tr.image(t); got.String() != after[rank].String() {
			return fmt.Errorf("the step after loading gave %v, before %v", got, after[rank])
		}
		// Restore goes back to the loaded values: Load snapshots.
		if err := tr.state.Restore(); err != nil {
			return err
		}
		if got := tr.image(t); got.String() != saved[rank].String() {
			return fmt.Errorf("restored %v after loading %v", got, saved[rank])
		}
		return c.Close(bg)
	})
}

// TestNoCheckpoint: an empty or missing directory is ErrNoCheckpoint on
// every rank, and leaves the state alone.
func TestNoCheckpoint(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "absent")} {
		onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
			tr := newTrainee(t, rank, 2, 20, 2)
			tr.step = 9
			c, err := New(dir, tr.state, Runtime(r))
			if err != nil {
				return err
			}
			if _, err := c.Load(bg); !errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), dir) {
				return fmt.Errorf("load of %s: %v", dir, err)
			}
			if tr.step != 9 {
				return fmt.Errorf("step %d after a failed load", tr.step)
			}
			return c.Close(bg)
		})
	}
}

// TestKeep: after each write only the newest Keep checkpoints remain,
// and temporary files of an unfinished write are removed.
func TestKeep(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, tmpPrefix+"123.tmp"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 2, 40, 2)
		c, err := New(dir, tr.state, Runtime(r), Keep(2))
		if err != nil {
			return err
		}
		for s := int64(1); s <= 5; s++ {
			if err := c.Save(bg, s*10); err != nil {
				return err
			}
		}
		return c.Close(bg)
	})
	var names []string
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		names = append(names, de.Name())
	}
	if want := []string{FileName(40), FileName(50)}; !slices.Equal(names, want) {
		t.Fatalf("the directory holds %v, want %v", names, want)
	}
}

// TestBadOptions: bad arguments are errors, not panics.
func TestBadOptions(t *testing.T) {
	tr := newTrainee(t, 0, 1, 10, 2)
	one := Group(solo{}, func() int { return 0 })
	for _, c := range []struct {
		name string
		err  func() error
	}{
		{"no dir", func() error { _, err := New("", tr.state, one); return err }},
		{"nil state", func() error { _, err := New("d", nil, one); return err }},
		{"keep 0", func() error { _, err := New("d", tr.state, one, Keep(0)); return err }},
		{"negative step", func() error {
			c, _ := New(t.TempDir(), tr.state, one)
			return c.Save(bg, -1)
		}},
		{"persist every 0", func() error {
			c, _ := New(t.TempDir(), tr.state, one)
			return c.PersistCommits(bg, 0, func() int64 { return 0 })
		}},
		{"closed", func() error {
			c, _ := New(t.TempDir(), tr.state, one)
			_ = c.Close(bg)
			return c.Save(bg, 1)
		}},
	} {
		if err := c.err(); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// TestSaveFailureOnEveryRank: a write that fails on rank 0 (the directory
// is a file) is reported on every rank by the next Save, as a *SaveError
// with rank 0's message, and by Close; in synchronous mode by Save itself.
func TestSaveFailureOnEveryRank(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, background := range []bool{true, false} {
		var mu sync.Mutex
		var msgs []string
		onRanks(t, 3, func(r *hvd.Runtime, rank int) error {
			tr := newTrainee(t, rank, 3, 30, 2)
			c, err := New(file, tr.state, Runtime(r), Background(background))
			if err != nil {
				return err
			}
			err = c.Save(bg, 1)
			if background {
				if err != nil {
					return fmt.Errorf("the first Save returned %v: its write's outcome is the next call's", err)
				}
				err = c.Save(bg, 2)
			}
			var se *SaveError
			if !errors.As(err, &se) || se.Step != 1 || (rank == 0) != (se.Err != nil) {
				return fmt.Errorf("save: %v", err)
			}
			mu.Lock()
			msgs = append(msgs, err.Error())
			mu.Unlock()
			return c.Close(bg)
		})
		if len(msgs) != 3 || msgs[0] != msgs[1] || msgs[1] != msgs[2] || !strings.Contains(msgs[0], file) {
			t.Fatalf("background %v: the ranks' errors %q", background, msgs)
		}
		t.Log(msgs[0])
	}
}

// TestCloseReportsLastWrite: a failed last write is Close's error.
func TestCloseReportsLastWrite(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tr := newTrainee(t, 0, 1, 10, 2)
	c, err := New(file, tr.state, Group(solo{}, func() int { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Save(bg, 3); err != nil {
		t.Fatal(err)
	}
	var se *SaveError
	if err := c.Close(bg); !errors.As(err, &se) || se.Step != 3 {
		t.Fatalf("close: %v", err)
	}
}
