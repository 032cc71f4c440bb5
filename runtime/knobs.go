package runtime

import (
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/steps"
	"github.com/gohorovod/gohorovod/runtime/internal/transport"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// warnUnimplemented logs one warning for each knob that cfg sets but that
// gohorovod does not implement yet (config.Config.Unimplemented). Every
// rank logs its own: each rank reads its own environment, and a knob set on
// one rank only would go unmentioned if rank 0 alone spoke.
func warnUnimplemented(log zerolog.Logger, cfg config.Config) {
	for _, name := range cfg.Unimplemented() {
		log.Warn().Str("knob", name).Msg(name + " is set but not implemented yet: it has no effect")
	}
}

// agreedSettings are the values this rank's loop will run with that every
// rank must hold alike: the configuration's (config.Config.Agreed) and those
// of the Init options that change the sequence of transport calls, as
// applied to the loop (defaults included). WithChunkBytes sets how many
// calls a large buffer takes, WithMaxFusedBytes which tensors are fused
// together, WithFusionChunkBytes how many calls a fused response takes;
// ranks that differ in any of them make mismatched calls. The GPU options
// are left out: the ranks agree on the GPU path with a collective of their
// own when the first GPU tensor arrives.
func (l *loop) agreedSettings() []config.Setting {
	return append(l.cfg.Agreed(),
		config.Setting{Name: "hvd.WithChunkBytes", Value: strconv.Itoa(l.p.chunk)},
		config.Setting{Name: "hvd.WithMaxFusedBytes", Value: strconv.FormatInt(l.planner.MaxFused, 10)},
		config.Setting{Name: "hvd.WithFusionChunkBytes", Value: strconv.Itoa(l.p.fuseChunk)},
	)
}

// agree checks, before the loop starts, that every rank holds the agreed
// settings alike: it gathers every rank's encoding on every rank (the sizes,
// then the bytes, as negotiate does) and compares them, so that every rank
// returns the same *config.AgreementError when they differ. On error it
// closes what newLoop opened.
func (l *loop) agree() (err error) {
	defer func() {
		if err != nil {
			l.tl.close(time.Now())
		}
	}()
	if l.size == 1 {
		return nil
	}
	mine := l.agreedSettings()
	ws := make([]wire.Setting, len(mine))
	for i, s := range mine {
		ws[i] = wire.Setting{Name: s.Name, Value: s.Value}
	}
	encoded, err := steps.Gather(l.com, wire.AppendSettings(nil, ws))
	if err != nil {
		return fmt.Errorf("gathering the ranks' settings: %w", err)
	}
	all := make([][]config.Setting, len(encoded))
	for r, b := range encoded {
		got, err := wire.DecodeSettings(b)
		if err != nil {
			return fmt.Errorf("settings from rank %d: %w", r, err)
		}
		all[r] = make([]config.Setting, len(got))
		for i, s := range got {
			all[r][i] = config.Setting{Name: s.Name, Value: s.Value}
		}
	}
	return config.CheckAgreement(all)
}

// acrossNodesFusion is the fusion threshold of a job over MPI that spans
// nodes, where the user kept the default (see acrossNodesPath).
const acrossNodesFusion = 128 << 20

// dataPath is how the loop hands data to the transport: the fusion
// threshold, the transport's chunk, the fusion buffer's piece and the
// largest tensor fused (the loop's fields chunk, fuseChunk and
// planner.MaxFused; 0 means none).
type dataPath struct {
	fusion           int64
	chunk, fuseChunk int
	maxFused         int64
}

// acrossNodesPath returns the data path of a job over MPI whose ranks span
// nodes (more than one: countNodes), and true; or false where the defaults
// stand. Every rank decides alike: the node count is the job's, not this
// rank's cross group's, which is smaller on a node with more ranks than
// another. On
// one node the defaults keep every call's bytes in cache (small fusion
// buffer, chunks, pieces). Across a link slower than memory each MPI call
// pays the link's round trips and Open MPI's rendezvous several times, so
// few, large calls win: one call per fused response, every tensor fused,
// and a fusion buffer of 128 MiB (Horovod's own default) where the user
// kept the default threshold, so that a model's gradients go in one call
// (measured on the emulated cluster, docs/BENCHMARKS.md, "Across nodes").
// The Init options, applied after, still override each.
func acrossNodesPath(cfg config.Config, name string, nodes int) (dataPath, bool) {
	if name != transport.MPI || nodes < 2 {
		return dataPath{}, false
	}
	p := dataPath{fusion: cfg.FusionThreshold}
	if cfg.FusionThreshold == config.DefaultFusionThreshold {
		p.fusion = acrossNodesFusion
	}
	return p, true
}

// countNodes returns how many nodes the job's ranks are on, given each
// rank's node (Runtime.nodes: its node's lowest rank).
func countNodes(nodes []int) int {
	seen := map[int]bool{}
	for _, n := range nodes {
		seen[n] = true
	}
	return len(seen)
}
