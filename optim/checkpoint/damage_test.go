package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// saveSteps writes checkpoints of a trainee at the given steps (one step
// of training between them) into dir, on one rank, and returns the
// trainee's image at each.
func saveSteps(t *testing.T, dir string, steps ...int64) map[int64]image {
	t.Helper()
	imgs := map[int64]image{}
	tr := newTrainee(t, 0, 1, 100, 4)
	c, err := New(dir, tr.state, Group(solo{}, func() int { return 0 }), Keep(len(steps)))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		for tr.step < s {
			if _, err := tr.train(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Save(bg, s); err != nil {
			t.Fatal(err)
		}
		imgs[s] = tr.image(t)
	}
	if err := c.Close(bg); err != nil {
		t.Fatal(err)
	}
	return imgs
}

// damages are the ways a checkpoint file is found damaged.
var damages = []struct {
	name   string
	damage func(b []byte) []byte
	reason string // in the message
}{
	{"truncated by half", func(b []byte) []byte { return b[:len(b)/2] }, "truncated"},
	{"truncated by a byte", func(b []byte) []byte { return b[:len(b)-1] }, "truncated"},
	{"empty", func(b []byte) []byte { return nil }, "truncated"},
	{"a byte flipped in the last part", func(b []byte) []byte { b[len(b)-3] ^= 0x40; return b }, "checksum"},
	{"a byte flipped in the manifest", func(b []byte) []byte { b[headerLen+5] ^= 0x01; return b }, "checksum"},
	{"a byte appended", func(b []byte) []byte { return append(b, 0) }, "its manifest says"},
}

// TestDamagedNewestFallsBack damages the newest of two checkpoints in each
// way: Load on every rank reports it by name and why, renames it aside,
// and resumes from the one before, bit for bit.
func TestDamagedNewestFallsBack(t *testing.T) {
	pristine := t.TempDir()
	imgs := saveSteps(t, pristine, 10, 20)
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, pristine, dir)
			newest := filepath.Join(dir, FileName(20))
			damageFile(t, newest, d.damage)
			var mu sync.Mutex
			var reports []string
			onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
				tr := newTrainee(t, rank, 2, 100, 4)
				c, err := New(dir, tr.state, Runtime(r), Logf(func(f string, a ...any) {
					mu.Lock()
					reports = append(reports, fmt.Sprintf(f, a...))
					mu.Unlock()
				}))
				if err != nil {
					return err
				}
				info, err := c.Load(bg)
				if err != nil {
					return err
				}
				if info.Step != 10 || len(info.Skipped) != 1 || !strings.Contains(info.Skipped[0], newest+" is damaged") ||
					!strings.Contains(info.Skipped[0], d.reason) {
					return fmt.Errorf("loaded step %d, skipped %q", info.Step, info.Skipped)
				}
				if got := tr.image(t); got.String() != imgs[10].String() {
					return fmt.Errorf("loaded %v, saved %v", got, imgs[10])
				}
				return c.Close(bg)
			})
			if len(reports) != 1 || !strings.Contains(reports[0], newest) {
				t.Errorf("rank 0 reported %q", reports)
			}
			if _, err := os.Stat(newest + ".damaged"); err != nil {
				t.Errorf("the damaged file was not renamed aside: %v", err)
			}
			t.Log(reports)
		})
	}
}

// TestAllDamaged: when every checkpoint is damaged, Load is a
// *NoValidError on every rank naming each, and the state is untouched.
func TestAllDamaged(t *testing.T) {
	dir := t.TempDir()
	saveSteps(t, dir, 1, 2)
	damageFile(t, filepath.Join(dir, FileName(1)), damages[0].damage)
	damageFile(t, filepath.Join(dir, FileName(2)), damages[3].damage)
	onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 2, 100, 4)
		before := tr.image(t)
		c, err := New(dir, tr.state, Runtime(r))
		if err != nil {
			return err
		}
		_, err = c.Load(bg)
		var nv *NoValidError
		if !errors.As(err, &nv) || len(nv.Skipped) != 2 || !strings.Contains(err.Error(), FileName(1)) || !strings.Contains(err.Error(), FileName(2)) {
			return fmt.Errorf("load: %v", err)
		}
		if got := tr.image(t); got.String() != before.String() {
			return fmt.Errorf("the state changed to %v", got)
		}
		return c.Close(bg)
	})
}

// TestMismatchOnEveryRank loads a checkpoint of a model whose weight has 4
// elements into one whose weight has 5: every rank's error names the
// parameter and both sizes, and the state is left as it was.
func TestMismatchOnEveryRank(t *testing.T) {
	dir := t.TempDir()
	saveSteps(t, dir, 3)
	onRanks(t, 3, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 3, 100, 5)
		before := tr.image(t)
		c, err := New(dir, tr.state, Runtime(r))
		if err != nil {
			return err
		}
		_, err = c.Load(bg)
		if err == nil || !strings.Contains(err.Error(), `"fc.w" has 32 bytes in the state, 40 in this model`) ||
			!strings.Contains(err.Error(), FileName(3)) || !strings.Contains(err.Error(), `"model"`) {
			return fmt.Errorf("load: %v", err)
		}
		if got := tr.image(t); got.String() != before.String() {
			return fmt.Errorf("the state changed to %v", got)
		}
		return c.Close(bg)
	})
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	des, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(from, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, de.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func damageFile(t *testing.T, path string, damage func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, damage(b), 0o644); err != nil {
		t.Fatal(err)
	}
}
