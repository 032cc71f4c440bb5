package runtime

import (
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// rankError is the error that reports c, another rank's farewell: a
// *RankError naming the rank.
func rankError(c cycle.Cause) *RankError {
	if c.Kind == wire.FarewellShutdown {
		return &RankError{Rank: c.Rank, Shutdown: true}
	}
	return &RankError{Rank: c.Rank, Message: c.Text, Stall: c.Kind == wire.FarewellStall}
}
