package cycle

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/autotune"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// TuningSync is autotuning's exchange at the start of every global cycle
// while tuning: rank 0's setting reaches every rank (one broadcast), which
// applies it to that same cycle. The setting carries a finished flag:
// after it, no rank broadcasts again.
type TuningSync struct {
	rank     int
	msg      []byte
	applied  autotune.Params
	finished bool
	step     Step
}

// TuningChange is what a received setting changes.
type TuningChange struct {
	// Params is the setting received; Changed says that it differs from
	// the one applied before, which the loop must then replace.
	Params  autotune.Params
	Changed bool
	// SwitchCache says that the response cache was switched on or off:
	// every rank replaces its cache before the next cycle begins.
	SwitchCache bool
	// Finished says that tuning ended with this setting, which stays.
	Finished bool
}

// NewTuningSync returns the exchange of rank, whose loop runs with initial.
func NewTuningSync(rank int, initial autotune.Params) *TuningSync {
	return &TuningSync{rank: rank, msg: make([]byte, wire.TuningSize), applied: initial}
}

// Active reports whether tuning still runs: every global cycle then starts
// with the exchange.
func (t *TuningSync) Active() bool { return !t.finished }

// Applied returns the setting in force.
func (t *TuningSync) Applied() autotune.Params { return t.applied }

// Begin starts the exchange and returns its one step, a broadcast from
// rank 0: p is rank 0's tuner's current setting and done whether the
// tuner has finished (other ranks' are ignored).
func (t *TuningSync) Begin(p autotune.Params, done bool) *Step {
	if t.rank == 0 {
		t.msg = wire.AppendTuning(t.msg[:0], &wire.Tuning{FusionBytes: p.FusionBytes, CycleTimeNs: int64(p.CycleTime),
			HierarchicalAllreduce: p.HierarchicalAllreduce, HierarchicalAllgather: p.HierarchicalAllgather,
			ChunkBytes: p.ChunkBytes, FusionChunkBytes: p.FusionChunkBytes, CacheEnabled: p.CacheEnabled, Done: done})
	}
	t.step = Step{Op: BcastBytes, What: "autotune: broadcasting the setting", Send: t.msg}
	return &t.step
}

// Received takes the broadcast's result and says what changes.
func (t *TuningSync) Received() (TuningChange, error) {
	w, err := wire.DecodeTuning(t.msg)
	if err != nil {
		return TuningChange{}, fmt.Errorf("autotune: the setting from rank 0: %w", err)
	}
	p := autotune.Params{FusionBytes: w.FusionBytes, CycleTime: time.Duration(w.CycleTimeNs),
		HierarchicalAllreduce: w.HierarchicalAllreduce, HierarchicalAllgather: w.HierarchicalAllgather,
		CacheEnabled: w.CacheEnabled, ChunkBytes: w.ChunkBytes, FusionChunkBytes: w.FusionChunkBytes}
	c := TuningChange{Params: p, Changed: p != t.applied, SwitchCache: p.CacheEnabled != t.applied.CacheEnabled,
		Finished: w.Done}
	t.applied = p
	t.finished = w.Done
	return c, nil
}
