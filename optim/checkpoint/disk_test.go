package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// mountTmpfs mounts a tmpfs of size at a new directory for the test, or
// skips it with the reason (not root, no mount).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs (root is needed): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func remount(t *testing.T, dir, mode string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,"+mode, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s %s: %v: %s", dir, mode, err, out)
	}
}

// TestReadOnlyDirectory: with the checkpoint directory's file system
// read-only (root ignores a directory's mode bits, so the test remounts
// a tmpfs read-only), Load still resumes from the checkpoint there, and
// Save fails on every rank with rank 0's message that names the
// directory; the checkpoint stays whole.
func TestReadOnlyDirectory(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	imgs := saveSteps(t, dir, 5)
	remount(t, dir, "ro")
	defer remount(t, dir, "rw")
	onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 2, 100, 4)
		c, err := New(dir, tr.state, Runtime(r), Background(false))
		if err != nil {
			return err
		}
		if info, err := c.Load(bg); err != nil || info.Step != 5 || tr.image(t).String() != imgs[5].String() {
			return fmt.Errorf("load from a read-only directory: step %d, %v", info.Step, err)
		}
		err = c.Save(bg, 6)
		var se *SaveError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "cannot write in "+dir) || !strings.Contains(err.Error(), "read-only") {
			return fmt.Errorf("save in a read-only directory: %v", err)
		}
		if rank == 0 {
			t.Log(err)
		}
		return c.Close(bg)
	})
	assertOnly(t, dir, FileName(5))
}

// TestDiskFull fills a small tmpfs: the Save that does not fit fails on
// every rank (reported by the next call, as writes are in the
// background) with rank 0's "no space left" and leaves no temporary file;
// the checkpoints before it load as they were written.
func TestDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "256k")
	imgs := saveSteps(t, dir, 1)
	// A state that no longer fits: a weight of 40,000 float64s.
	onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 2, 100, 40000)
		c, err := New(dir, tr.state, Runtime(r))
		if err != nil {
			return err
		}
		if err := c.Save(bg, 2); err != nil {
			return err
		}
		err = c.Close(bg)
		var se *SaveError
		if !errors.As(err, &se) || se.Step != 2 || !strings.Contains(err.Error(), "no space left on device") {
			return fmt.Errorf("save on a full disk: %v", err)
		}
		if rank == 0 {
			t.Log(err)
		}
		return nil
	})
	assertOnly(t, dir, FileName(1))
	onRanks(t, 2, func(r *hvd.Runtime, rank int) error {
		tr := newTrainee(t, rank, 2, 100, 4)
		c, err := New(dir, tr.state, Runtime(r))
		if err != nil {
			return err
		}
		if info, err := c.Load(bg); err != nil || info.Step != 1 || tr.image(t).String() != imgs[1].String() {
			return fmt.Errorf("load after the full disk: step %d, %v", info.Step, err)
		}
		return c.Close(bg)
	})
}

// assertOnly checks that dir holds exactly the named files.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, de := range des {
		got = append(got, de.Name())
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Fatalf("%s holds %v, want %v", filepath.Base(dir), got, names)
	}
}
