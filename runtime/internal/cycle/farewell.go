package cycle

import "github.com/gohorovod/gohorovod/runtime/internal/wire"

// FarewellOf is the record a rank gives the others once every rank has
// agreed to stop: its loop's failure first, else its stall inspector's
// verdict (stall, the error the inspector stopped the job with), else
// whether Shutdown was called on it.
func FarewellOf(failing, stall error, shutdown bool) wire.Farewell {
	switch {
	case failing != nil:
		return wire.Farewell{Kind: wire.FarewellFailed, Text: failing.Error()}
	case stall != nil:
		return wire.Farewell{Kind: wire.FarewellStall, Text: stall.Error()}
	case shutdown:
		return wire.Farewell{Kind: wire.FarewellShutdown}
	}
	return wire.Farewell{Kind: wire.FarewellNone}
}

// Cause is the root cause of a stop that every rank reports: Rank's
// farewell (a failure, a stall, or Shutdown called).
type Cause struct {
	Rank int
	wire.Farewell
}

// FarewellCause decides, from every rank's farewell record (encoded by
// wire.AppendFarewell), the root cause that rank me reports: the lowest
// rank that failed (or whose stall inspector stopped the job), else the
// lowest rank that called Shutdown when me did not. ok is false when there
// is none: a clean shutdown that me asked for, or records it cannot read.
func FarewellCause(recs [][]byte, me int) (c Cause, ok bool) {
	shut, meShut := -1, false
	for r, rec := range recs {
		f, err := wire.DecodeFarewell(rec)
		if err != nil {
			continue
		}
		switch f.Kind {
		case wire.FarewellFailed, wire.FarewellStall:
			return Cause{Rank: r, Farewell: f}, true
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
		return Cause{}, false
	}
	return Cause{Rank: shut, Farewell: wire.Farewell{Kind: wire.FarewellShutdown}}, true
}
