package runtime

// The kinds of farewell record: why a rank stops (see loop.farewell).
const (
	farewellNone     byte = iota // it stops because another rank asked
	farewellShutdown             // Shutdown was called on it
	farewellStall                // its stall inspector stopped the job
	farewellFailed               // its loop failed; the error's text follows
)

// farewellCause decides, from every rank's farewell record (a kind byte
// and a text), the root cause that rank me reports: the lowest rank that
// failed (or whose stall inspector stopped the job), else the lowest rank
// that called Shutdown when it is not me, else nil (a clean shutdown that
// me asked for, or records it cannot read).
func farewellCause(recs [][]byte, me int) error {
	shut := -1
	for r, rec := range recs {
		if len(rec) == 0 {
			continue
		}
		switch rec[0] {
		case farewellFailed, farewellStall:
			return &RankError{Rank: r, Message: string(rec[1:]), Stall: rec[0] == farewellStall}
		case farewellShutdown:
			if shut < 0 {
				shut = r
			}
		}
	}
	if shut < 0 || (me < len(recs) && len(recs[me]) > 0 && recs[me][0] == farewellShutdown) {
		return nil
	}
	return &RankError{Rank: shut, Shutdown: true}
}
