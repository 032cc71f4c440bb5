package runtime

import (
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// farewellCause is cycle.FarewellCause as the error rank me reports: a
// *RankError naming the rank, or nil.
func farewellCause(recs [][]byte, me int) error {
	c, ok := cycle.FarewellCause(recs, me)
	if !ok {
		return nil
	}
	if c.Kind == wire.FarewellShutdown {
		return &RankError{Rank: c.Rank, Shutdown: true}
	}
	return &RankError{Rank: c.Rank, Message: c.Text, Stall: c.Kind == wire.FarewellStall}
}
