//go:build !mpi || !cgo

package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/tensor"
)

// TestTimelineRun runs the timeline workload at 2 and 3 ranks and checks
// the two files it produces: valid, properly nested, in order on every row
// (with no repair by the writer), with the expected spans.
func TestTimelineRun(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			dir := t.TempDir()
			first, second := filepath.Join(dir, "first.json"), filepath.Join(dir, "second.json")
			cfg := testConfig()
			cfg.Timeline, cfg.TimelineMarkCycles = first, true
			var logs lockedBuffer
			c := startClusterWith(t, n, WithConfig(cfg), WithLogger(zerolog.New(&logs).Level(zerolog.ErrorLevel)))
			c.each(t, func(r *Runtime, rank int) error { return timelineRun(ctxT(t), r, rank, second) })
			if err := StopLocal(c.rts); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(logs.String(), "timeline") {
				t.Errorf("logs: %s", logs.String())
			}
			checkTimelineFiles(t, first, second, n)
		})
	}
}

func TestTimelineStartStopErrors(t *testing.T) {
	var r Runtime
	if err := r.StartTimeline("x.json", false); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("StartTimeline before Init: %v", err)
	}
	if err := r.StopTimeline(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("StopTimeline before Init: %v", err)
	}

	// Without HOROVOD_TIMELINE: StartTimeline is refused on every rank
	// with Horovod's text; StopTimeline does nothing.
	c := startCluster(t, 2, testConfig())
	c.each(t, func(r *Runtime, rank int) error {
		if err := r.StartTimeline("x.json", false); !errors.Is(err, ErrTimelineDisabled) ||
			!strings.Contains(err.Error(), "HOROVOD_TIMELINE=DYNAMIC") {
			return fmt.Errorf("StartTimeline without a timeline: %v", err)
		}
		return r.StopTimeline()
	})
	StopLocal(c.rts)
	if err := c.rts[0].StartTimeline("x.json", false); !errors.Is(err, ErrShutdown) {
		t.Errorf("StartTimeline after Shutdown: %v", err)
	}
	if err := c.rts[0].StopTimeline(); !errors.Is(err, ErrShutdown) {
		t.Errorf("StopTimeline after Shutdown: %v", err)
	}
}

// TestTimelineDynamic: HOROVOD_TIMELINE=DYNAMIC opens no file at Init;
// StartTimeline does, reports a file it cannot create on rank 0 only, and
// switches files when one is being written.
func TestTimelineDynamic(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.Timeline = "DYNAMIC"
	c := startCluster(t, 2, cfg)
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	c.each(t, func(r *Runtime, rank int) error {
		if err := r.StopTimeline(); err != nil {
			return fmt.Errorf("StopTimeline with no file: %w", err)
		}
		if err := r.StartTimeline("", false); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("StartTimeline(\"\"): %v", err)
		}
		err := r.StartTimeline(filepath.Join(dir, "no", "such", "dir.json"), false)
		if rank == 0 && err == nil || rank != 0 && err != nil {
			return fmt.Errorf("StartTimeline in a missing directory: %v", err)
		}
		if _, err := r.Allreduce(ctxT(t), fill(tensor.Float32, 2, 1), "dyn", Sum); err != nil {
			return err
		}
		if err := r.StartTimeline(a, false); err != nil {
			return err
		}
		if _, err := r.Allreduce(ctxT(t), fill(tensor.Float32, 2, 1), "dyn", Sum); err != nil {
			return err
		}
		if err := r.StartTimeline(b, true); err != nil { // completes a
			return err
		}
		_, err = r.Allreduce(ctxT(t), fill(tensor.Float32, 2, 1), "dyn", Sum)
		return err
	})
	StopLocal(c.rts)
	if _, err := os.Stat("DYNAMIC"); err == nil {
		t.Error("HOROVOD_TIMELINE=DYNAMIC made a file named DYNAMIC")
	}
	for _, f := range []struct {
		path   string
		cycles bool
	}{{a, false}, {b, true}} {
		tr := readTimeline(t, f.path)
		if (tr.Cycles > 0) != f.cycles {
			t.Errorf("%s: %d cycle marks", f.path, tr.Cycles)
		}
		row := tr.Row("allreduce.dyn")
		if row == nil {
			t.Errorf("%s: no allreduce.dyn", f.path)
			continue
		}
		if got := names(row.Spans); !slices.Equal(got, []string{"QUEUE", "MPI_ALLREDUCE", "ALLREDUCE"}) {
			t.Errorf("%s: spans %q", f.path, got)
		}
	}
}

func TestTimelinePackageLevel(t *testing.T) {
	prev := SetDefault(new(Runtime))
	defer SetDefault(prev)
	if err := StartTimeline("x.json", true); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("StartTimeline: %v", err)
	}
	if err := StopTimeline(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("StopTimeline: %v", err)
	}
}
