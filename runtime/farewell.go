package runtime

import "github.com/gohorovod/gohorovod/runtime/internal/wire"

// farewellCause decides, from every rank's farewell record (encoded by
// wire.AppendFarewell), the root cause that rank me reports: the lowest
// rank that failed (or whose stall inspector stopped the job), else the
// lowest rank that called Shutdown when it is not me, else nil (a clean
// shutdown that me asked for, or records it cannot read).
func farewellCause(recs [][]byte, me int) error {
	shut, meShut := -1, false
	for r, rec := range recs {
		f, err := wire.DecodeFarewell(rec)
		if err != nil {
			continue
		}
		switch f.Kind {
		case wire.FarewellFailed, wire.FarewellStall:
			return &RankError{Rank: r, Message: f.Text, Stall: f.Kind == wire.FarewellStall}
		case wire.FarewellShutdown:
			if shut < 0 {
				shut = r
			}
			if r == me {
				meShut = true
			}
		}
	}
	if shut < 0 || meShut {
		return nil
	}
	return &RankError{Rank: shut, Shutdown: true}
}
