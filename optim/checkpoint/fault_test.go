package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// failing is a Broadcaster whose every call fails, as the group's do when
// a rank has died.
type failing struct{}

var errGroup = errors.New("the group failed")

func (failing) BroadcastBytes(context.Context, []byte, int) ([]byte, error) { return nil, errGroup }

// TestGroupFailure: when the group fails under Flush or Load, on rank 0
// and on another rank, the error says what was being agreed and wraps the
// group's; nothing hangs or panics, Close still waits for the write, and
// the file written is whole.
func TestGroupFailure(t *testing.T) {
	for _, rank := range []int{0, 1} {
		dir := t.TempDir()
		tr := newTrainee(t, 0, 1, 40, 2)
		c, err := New(dir, tr.state, Group(failing{}, func() int { return rank }))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Save(bg, 1); err != nil {
			t.Fatalf("rank %d: save: %v", rank, err)
		}
		err = c.Flush(bg)
		if !errors.Is(err, errGroup) || !strings.Contains(err.Error(), "agreeing on the write of step 1") {
			t.Fatalf("rank %d: flush: %v", rank, err)
		}
		if _, err := c.Load(bg); !errors.Is(err, errGroup) || !strings.Contains(err.Error(), "receiving the checkpoint from rank 0") {
			t.Fatalf("rank %d: load: %v", rank, err)
		}
		if err := c.Close(bg); err != nil {
			t.Fatalf("rank %d: close: %v", rank, err)
		}
		if rank == 0 {
			b, err := os.ReadFile(filepath.Join(dir, FileName(1)))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := decode(b); err != nil {
				t.Fatalf("the file written: %v", err)
			}
		} else if _, err := os.Stat(filepath.Join(dir, FileName(1))); err == nil {
			t.Fatal("rank 1 wrote a checkpoint")
		}
	}
}

// TestCancelledFlush: a Flush whose context is cancelled while rank 0's
// write is in flight returns the context's error; a later Close waits for
// the write and agrees on it.
func TestCancelledFlush(t *testing.T) {
	dir := t.TempDir()
	tr := newTrainee(t, 0, 1, 40, 2)
	c, err := New(dir, tr.state, Group(solo{}, func() int { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Save(bg, 5); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	// The write may already be done; then Flush agrees at once, and the
	// cancelled context fails nothing.
	if err := c.Flush(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("flush: %v", err)
	}
	if err := c.Close(bg); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName(5))); err != nil {
		t.Fatal(err)
	}
}
