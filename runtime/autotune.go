package runtime

import (
	"fmt"
	"os"
	"time"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/autotune"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/steps"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// tuning is the global set's autotuning (HOROVOD_AUTOTUNE): rank 0 runs
// the tuner (runtime/internal/autotune) on the bytes its cycles allreduce
// and the time they take; at the start of every cycle while tuning, rank 0
// broadcasts the setting, and every rank applies it to the same cycle. The
// broadcast carries a done flag: after it, no rank broadcasts again.
type tuning struct {
	t     *autotune.Tuner   // rank 0 only
	log   *os.File          // HOROVOD_AUTOTUNE_LOG, rank 0 only
	sync  *cycle.TuningSync // the broadcast of rank 0's setting, and the setting applied
	bytes int64             // allreduced since the last observation
	since time.Time         // the last observation
	// capacity is the response cache's configured capacity; switchCache
	// asks the next global cycle to replace the cache (with one of
	// capacity when the setting applied enables it, else with none) before it
	// begins: the cycle that received the setting had already looked
	// its requests up.
	capacity    int
	switchCache bool
	// seen holds the names allreduced since the current step began (rank
	// 0); observed counts the steps given to the tuner.
	seen     map[string]bool
	observed int
}

// openTuning starts autotuning on the global set's loop when the
// configuration asks for it. The knobs that differ from their defaults
// were set by the user and stay fixed (the response cache among them: a
// capacity other than the default, 0 included, is not switched). After
// Horovod's knobs (the categorical ones: hierarchical allreduce and
// allgather where there are several nodes, the response cache on and off)
// the tuner tries the runtime's own piece sizes (WithChunkBytes and
// WithFusionChunkBytes, a few values each) on the global set.
func (l *loop) openTuning() error {
	if !l.cfg.Autotune || l.size == 1 {
		l.r.stats.tuning.Store(false) // a runtime initialised again
		return nil
	}
	d := config.Default()
	init := autotune.Params{FusionBytes: l.cfg.FusionThreshold, CycleTime: l.cfg.CycleTime,
		HierarchicalAllreduce: l.cfg.HierarchicalAllreduce, HierarchicalAllgather: l.cfg.HierarchicalAllgather,
		CacheEnabled: l.cfg.CacheCapacity > 0, ChunkBytes: int64(l.p.chunk), FusionChunkBytes: int64(l.p.fuseChunk)}
	tu := &tuning{sync: cycle.NewTuningSync(l.rank, init), since: time.Now(), capacity: l.cfg.CacheCapacity,
		seen: make(map[string]bool)}
	if l.rank == 0 {
		fixed := map[string]bool{
			autotune.DimFusionMB:               l.cfg.FusionThreshold != d.FusionThreshold,
			autotune.DimCycleTimeMs:            l.cfg.CycleTime != d.CycleTime,
			autotune.BoolHierarchicalAllreduce: l.p.hier == nil || l.cfg.HierarchicalAllreduce,
			autotune.BoolHierarchicalAllgather: l.p.hier == nil || l.cfg.HierarchicalAllgather,
			autotune.BoolCacheEnabled:          l.cfg.CacheCapacity != d.CacheCapacity || l.cfg.CacheCapacity <= 0,
			autotune.ChoiceChunkBytes:          l.p.chunk != defaultChunkBytes,
			autotune.ChoiceFusionChunkBytes:    l.p.fuseChunk != defaultFusionChunkBytes,
		}
		c := autotune.Config{Initial: init, Fixed: fixed, MaxSamples: l.cfg.AutotuneMaxSamples,
			WarmupSamples: l.cfg.AutotuneWarmupSamples, StepsPerSample: l.cfg.AutotuneStepsPerSample,
			Noise: l.cfg.AutotuneNoise, Seed: 1, Choices: autotune.DefaultChoices(defaultChunkBytes, defaultFusionChunkBytes)}
		if c.WarmupSamples == 0 {
			c.WarmupSamples = -1 // the tuner's zero means its default; the knob's 0 means none
		}
		if l.cfg.AutotuneLog != "" {
			f, err := os.Create(l.cfg.AutotuneLog)
			if err != nil {
				return fmt.Errorf("autotune log: %w", err)
			}
			tu.log, c.Log = f, f
		}
		tu.t = autotune.NewTuner(c)
	}
	l.tune = tu
	l.r.stats.tuning.Store(true)
	return nil
}

// syncTuning runs at the start of a global cycle while tuning: rank 0's
// setting reaches every rank, which applies it.
func (l *loop) syncTuning() error {
	tu := l.tune
	if tu == nil || !tu.sync.Active() {
		return nil
	}
	var cur autotune.Params
	var done bool
	if l.rank == 0 {
		cur, done = tu.t.Current(), tu.t.Done()
	}
	st := tu.sync.Begin(cur, done)
	if err := steps.Do(l.com, st); err != nil {
		return fmt.Errorf("%s: %w", st.What, err)
	}
	c, err := tu.sync.Received()
	if err != nil {
		return err
	}
	p := c.Params
	if c.Changed {
		if c.SwitchCache {
			tu.switchCache = true
		}
		l.cfg.FusionThreshold, l.cfg.CycleTime = p.FusionBytes, p.CycleTime
		l.cfg.HierarchicalAllreduce, l.cfg.HierarchicalAllgather = p.HierarchicalAllreduce, p.HierarchicalAllgather
		l.p.chunk, l.p.fuseChunk = int(p.ChunkBytes), int(p.FusionChunkBytes)
		l.log.Debug().Int64("fusion_threshold", p.FusionBytes).Dur("cycle_time", p.CycleTime).
			Bool("hierarchical_allreduce", p.HierarchicalAllreduce).Bool("hierarchical_allgather", p.HierarchicalAllgather).
			Int64("chunk_bytes", p.ChunkBytes).Int64("fusion_chunk_bytes", p.FusionChunkBytes).
			Bool("cache_enabled", p.CacheEnabled).Msg("autotune: new setting")
	}
	if c.Finished {
		l.r.stats.tuning.Store(false)
		if l.rank == 0 {
			l.log.Info().Int64("fusion_threshold", p.FusionBytes).Dur("cycle_time", p.CycleTime).
				Bool("hierarchical_allreduce", p.HierarchicalAllreduce).Bool("hierarchical_allgather", p.HierarchicalAllgather).
				Int64("chunk_bytes", p.ChunkBytes).Int64("fusion_chunk_bytes", p.FusionChunkBytes).
				Bool("cache_enabled", p.CacheEnabled).Msg("Autotuner: best parameters kept")
			tu.closeLog(l)
		}
	}
	return nil
}

// cacheSwitch is asked before a global cycle begins: when the last setting
// switched the response cache, every rank (at the same cycle, the one after
// the broadcast) replaces its cache, with an empty one of capacity (the
// configured capacity, or 0 for none). It is asked after tuning has
// finished too, for a final setting that switched the cache.
func (tu *tuning) cacheSwitch() (capacity int, ok bool) {
	if tu == nil || !tu.switchCache {
		return 0, false
	}
	tu.switchCache = false
	if tu.sync.Applied().CacheEnabled {
		return tu.capacity, true
	}
	return 0, true
}

// observe gives rank 0's tuner one observation per training step:
// the bytes allreduced in the step and the time it took. As Horovod counts
// steps per tensor name, a step ends at the cycle that reduces a name
// already reduced since the last step ended; each observation covers the
// cycles since the last one, that one included, and the time since it.
// Cycles that reduce nothing are only time.
func (tu *tuning) observe(resps []wire.Response) {
	if tu == nil || !tu.sync.Active() || tu.t == nil {
		return
	}
	again := false
	var bytes int64
	for i := range resps {
		r := &resps[i]
		if t := wire.RequestType(r.Type); t != wire.Allreduce && t != wire.Adasum {
			continue
		}
		for _, s := range r.Shapes {
			n := int64(1)
			for _, d := range s {
				n *= d
			}
			bytes += n * int64(r.DType.Size())
		}
		for _, name := range r.Names {
			again = again || tu.seen[name]
		}
	}
	if bytes == 0 {
		return
	}
	tu.bytes += bytes
	if again {
		now := time.Now()
		tu.t.Observe(tu.bytes, now.Sub(tu.since))
		tu.observed++
		tu.bytes, tu.since = 0, now
		clear(tu.seen)
	}
	for i := range resps {
		r := &resps[i]
		if t := wire.RequestType(r.Type); t == wire.Allreduce || t == wire.Adasum {
			for _, name := range r.Names {
				tu.seen[name] = true
			}
		}
	}
}

func (tu *tuning) closeLog(l *loop) {
	if tu.log == nil {
		return
	}
	if err := tu.t.Err(); err != nil {
		l.log.Error().Err(err).Msg("autotune log")
	}
	if err := tu.log.Close(); err != nil {
		l.log.Error().Err(err).Msg("autotune log")
	}
	tu.log = nil
}
