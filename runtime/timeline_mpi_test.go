//go:build (mpi && cgo) || gloo

package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestMPITimeline runs the timeline workload under mpirun (np 2 and 3):
// HOROVOD_TIMELINE names a first file, StartTimeline switches to a second
// mid-run, StopTimeline ends it. Rank 0 writes both and checks them; the
// other ranks write nothing.
func TestMPITimeline(t *testing.T) {
	rank, size := world.Rank(), world.Size()
	dir := t.TempDir() // each rank's own
	first, second := filepath.Join(dir, "first.json"), filepath.Join(dir, "second.json")
	cfg := testConfig()
	cfg.Timeline, cfg.TimelineMarkCycles = first, true
	var logs lockedBuffer
	r := new(Runtime)
	if err := r.Init(append(worldOpts(t), WithConfig(cfg), WithLogger(zerolog.New(&logs).Level(zerolog.ErrorLevel)))...); err != nil {
		t.Fatal(err)
	}
	err := timelineRun(mpiCtx(t), r, rank, second)
	if serr := r.Shutdown(); serr != nil {
		t.Error(serr)
	}
	world.Barrier()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "timeline") {
		t.Errorf("logs: %s", logs.String())
	}
	if rank != 0 {
		if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
			t.Errorf("rank %d wrote %v (%v)", rank, ents, err)
		}
		return
	}
	checkTimelineFiles(t, first, second, size)
}
