package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/optim/elastic"
)

// File names: a checkpoint of step 1200 is "ckpt-000000001200.ghv"; while
// it is written it is a temporary file whose name starts with ".ckpt-"; a
// checkpoint found damaged by Load is renamed with ".damaged" appended.
const (
	prefix     = "ckpt-"
	suffix     = ".ghv"
	tmpPrefix  = ".ckpt-"
	damagedExt = ".damaged"
)

// FileName returns the name of the checkpoint of step in its directory.
func FileName(step int64) string { return fmt.Sprintf("%s%012d%s", prefix, step, suffix) }

// stepOf returns the step of a checkpoint file's name, and whether name
// is one.
func stepOf(name string) (int64, bool) {
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	s, err := strconv.ParseInt(name[len(prefix):len(name)-len(suffix)], 10, 64)
	if err != nil || s < 0 {
		return 0, false
	}
	return s, true
}

// entry is one checkpoint file of a directory.
type entry struct {
	name string
	step int64
}

// list returns the checkpoint files of dir, newest (highest step) first.
// A directory that does not exist has none.
func list(dir string) ([]entry, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: listing %s: %w", dir, err)
	}
	var es []entry
	for _, de := range des {
		if s, ok := stepOf(de.Name()); ok && de.Type().IsRegular() {
			es = append(es, entry{name: de.Name(), step: s})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return -cmpInt(a.step, b.step) })
	return es, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// write writes the checkpoint of parts at step into dir atomically: into a
// temporary file, which is synced to disk, then renamed into place, and
// the directory synced, so that after a crash the name holds either the
// whole new checkpoint or what it held before. A failure removes the
// temporary file and leaves the directory's checkpoints as they were.
func write(dir string, step int64, written time.Time, parts []elastic.Part) (path string, m Manifest, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", m, fmt.Errorf("checkpoint: creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*.tmp")
	if err != nil {
		return "", m, fmt.Errorf("checkpoint: cannot write in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if m, err = encodeTo(bw, step, written, parts); err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return "", m, fmt.Errorf("checkpoint: writing %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		return "", m, fmt.Errorf("checkpoint: syncing %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return "", m, fmt.Errorf("checkpoint: closing %s: %w", tmp, err)
	}
	path = filepath.Join(dir, FileName(step))
	if err = os.Rename(tmp, path); err != nil {
		return "", m, fmt.Errorf("checkpoint: renaming %s to %s: %w", tmp, path, err)
	}
	if err := syncDir(dir); err != nil {
		return path, m, err
	}
	return path, m, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: opening %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoint: syncing the directory %s: %w", dir, err)
	}
	return nil
}

// prune removes all but the keep newest checkpoints of dir, and the
// temporary files of writes that never finished (a process killed while
// writing). Only the one writer of dir may call it.
func prune(dir string, keep int) error {
	es, err := list(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range es[min(keep, len(es)):] {
		if err := os.Remove(filepath.Join(dir, e.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("checkpoint: removing the old %s: %w", e.name, err))
		}
	}
	errs = append(errs, removeTemps(dir))
	return errors.Join(errs...)
}

// removeTemps removes the temporary files of unfinished writes in dir.
func removeTemps(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("checkpoint: listing %s: %w", dir, err)
	}
	var errs []error
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tmpPrefix) && strings.HasSuffix(de.Name(), ".tmp") {
			if err := os.Remove(filepath.Join(dir, de.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("checkpoint: removing the unfinished %s: %w", de.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// found is the newest valid checkpoint of a directory, as read.
type found struct {
	path    string
	file    []byte
	m       Manifest
	parts   []elastic.Part
	skipped []string // why each newer file was passed over, naming it
}

// newest reads the checkpoints of dir from the newest and returns the
// first that is whole and matches its checksums. Each damaged one on the
// way is reported in skipped (by path, with the reason) and renamed with
// ".damaged" appended, so that it is never mistaken for the newest again
// and is kept for inspection. No checkpoint at all is ErrNoCheckpoint;
// only damaged ones is a *NoValidError.
func newest(dir string) (found, error) {
	es, err := list(dir)
	if err != nil {
		return found{}, err
	}
	if len(es) == 0 {
		return found{}, fmt.Errorf("%w in %s", ErrNoCheckpoint, dir)
	}
	var f found
	for _, e := range es {
		path := filepath.Join(dir, e.name)
		b, err := os.ReadFile(path)
		if err != nil {
			f.skipped = append(f.skipped, fmt.Sprintf("%s: cannot be read: %v", path, err))
			continue
		}
		m, parts, err := decode(b)
		if err == nil && m.Step != e.step {
			err = damaged("its manifest says step %d", m.Step)
		}
		if err != nil {
			why := fmt.Sprintf("%s is damaged: %v", path, err)
			if rerr := os.Rename(path, path+damagedExt); rerr != nil {
				why += fmt.Sprintf(" (and could not be renamed aside: %v)", rerr)
			} else {
				why += "; renamed to " + filepath.Base(path+damagedExt)
			}
			f.skipped = append(f.skipped, why)
			continue
		}
		f.path, f.file, f.m, f.parts = path, b, m, parts
		return f, nil
	}
	return f, &NoValidError{Dir: dir, Skipped: f.skipped}
}
