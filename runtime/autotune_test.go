package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/autotune"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestAutotune: with HOROVOD_AUTOTUNE, rank 0's tuner moves the fusion
// threshold and cycle time while the ranks reduce, every rank applies each
// setting at the same cycle (their loops agree at the end), the tuner
// finishes and logs its scored settings in Horovod's CSV, results stay
// right, the response cache is tried off and on (every rank switching its
// cache at the same cycle), and a knob set away from its default (the
// cycle time, the cache's capacity) stays fixed.
func TestAutotune(t *testing.T) {
	for _, fixCycle := range []bool{false, true} {
		t.Run(fmt.Sprintf("fixed_cycle=%v", fixCycle), func(t *testing.T) {
			const n = 3
			logPath := filepath.Join(t.TempDir(), "autotune.csv")
			cfg := config.Default()
			cfg.Autotune, cfg.AutotuneLog = true, logPath
			cfg.AutotuneWarmupSamples, cfg.AutotuneStepsPerSample, cfg.AutotuneMaxSamples = 0, 1, 6
			if fixCycle {
				cfg.CycleTime = 2 * time.Millisecond
				cfg.CacheCapacity = 512
			}
			rts, errs := initEach(t, memcomm.NewGroup(n), func(int) []Option {
				return []Option{WithConfig(cfg), WithLogger(zerolog.Nop())}
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			for i, r := range rts {
				if !r.Stats().Tuning {
					t.Fatalf("rank %d: Stats.Tuning is false while tuning", i)
				}
			}
			// The loops own the tuner: it is read once they have stopped.
			for step := range 150 {
				(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error {
					// Over 1 MiB: the 1 MiB transport chunk the tuner
					// tries splits it.
					x := tensor.FromFloat32(make([]float32, 300_000))
					x.Float32s()[7] = float32(rank)
					if err := r.AllreduceInPlace(ctx, x, "w", Sum); err != nil {
						return err
					}
					if x.Float32s()[7] != 3 {
						return fmt.Errorf("step %d: sum %v", step, x.Float32s()[7])
					}
					return nil
				})
			}
			StopLocal(rts)
			if !rts[0].loop.tune.t.Done() {
				t.Fatal("the tuner did not finish in 150 steps")
			}
			final := rts[0].loop.tune.t.Current()
			for i, r := range rts {
				l := r.loop
				if r.Stats().Tuning {
					t.Errorf("rank %d: Stats.Tuning is still true after tuning", i)
				}
				if l.tune.sync.Active() || l.cfg.FusionThreshold != final.FusionBytes || l.cfg.CycleTime != final.CycleTime ||
					int64(l.p.chunk) != final.ChunkBytes || int64(l.p.fuseChunk) != final.FusionChunkBytes ||
					l.tune.sync.Applied().CacheEnabled != final.CacheEnabled {
					t.Errorf("rank %d: done %v, fusion %d cycle %v chunk %d fusion chunk %d; rank 0's tuner kept %+v",
						i, !l.tune.sync.Active(), l.cfg.FusionThreshold, l.cfg.CycleTime, l.p.chunk, l.p.fuseChunk, final)
				}
			}
			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if lines[0] != autotune.LogHeader+",chunk_bytes,fusion_chunk_bytes" || len(lines) < 6 {
				t.Fatalf("autotune log:\n%s", b)
			}
			// The cache each rank ends with is the one the tuner kept.
			wantCap := 0
			if final.CacheEnabled {
				wantCap = cfg.CacheCapacity
			}
			for i, r := range rts {
				if got := r.loop.st.Cache().Capacity(); got != wantCap {
					t.Errorf("rank %d ends with a cache of %d entries, want %d (cache kept: %v)", i, got, wantCap, final.CacheEnabled)
				}
			}
			cycles := map[string]bool{} // the cycle_time_ms column of the scored settings
			caches := map[string]bool{}
			chunks, fuseChunks := map[string]bool{}, map[string]bool{}
			for _, line := range lines[1:] {
				f := strings.Split(line, ",")
				cycles[f[4]], caches[f[3]], chunks[f[7]], fuseChunks[f[8]] = true, true, true, true
			}
			// The runtime's own piece sizes are tried after Horovod's
			// knobs: three values each.
			if len(chunks) != 3 || len(fuseChunks) != 3 {
				t.Errorf("piece sizes tried: chunk %v, fusion chunk %v", chunks, fuseChunks)
			}
			if fixCycle && (len(cycles) != 1 || !cycles["2"] || final.CycleTime != 2*time.Millisecond) {
				t.Errorf("a fixed cycle time moved: %v, kept %v", cycles, final.CycleTime)
			}
			if fixCycle && (len(caches) != 1 || !caches["1"] || !final.CacheEnabled) {
				t.Errorf("a cache of a capacity set by hand was switched: %v, kept %v", caches, final.CacheEnabled)
			}
			if !fixCycle && (!caches["0"] || !caches["1"]) {
				t.Errorf("the cache was not tried off and on: cache_enabled column %v", caches)
			}
			if !fixCycle && len(cycles) < 3 {
				t.Errorf("the cycle time was hardly tuned: %v", cycles)
			}
		})
	}
}

// TestAutotuneCountsSteps: the tuner observes training steps, not cycles
// (as Horovod counts steps per tensor name): a step that allreduces three
// tensors one after another, in three cycles, is one observation, with the
// bytes of all three.
func TestAutotuneCountsSteps(t *testing.T) {
	const n, steps = 2, 12
	cfg := config.Default()
	cfg.Autotune = true
	cfg.AutotuneWarmupSamples, cfg.AutotuneStepsPerSample, cfg.AutotuneMaxSamples = 0, 1, 50
	rts, errs := initEach(t, memcomm.NewGroup(n), func(int) []Option {
		return []Option{WithConfig(cfg), WithLogger(zerolog.Nop())}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for range steps {
		(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error {
			for _, name := range []string{"a", "b", "c"} {
				x := tensor.FromFloat32(make([]float32, 1000))
				if err := r.AllreduceInPlace(ctx, x, name, Sum); err != nil {
					return err
				}
			}
			return nil
		})
	}
	StopLocal(rts)
	tu := rts[0].loop.tune
	// The first step only starts the count; every later one ends one.
	if tu.observed != steps-1 {
		t.Fatalf("%d observations over %d steps of 3 tensors (3 cycles each), want %d", tu.observed, steps, steps-1)
	}
	// The last observation ended at the last step's cycle of a (a step's
	// first cycle ends the step before, its bytes counted there): b's and
	// c's bytes (4000 each) wait for the next.
	if tu.bytes != 2*4000 {
		t.Fatalf("bytes since the last observation: %d", tu.bytes)
	}
}
