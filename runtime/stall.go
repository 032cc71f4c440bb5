package runtime

import "time"

// noteCachedProgress tells rank 0's coordinator that every rank submitted
// something at now when this cycle's agreement found cached requests that
// every rank holds (cached is how many: the common hits, the responses the
// cycle replays from the cache), so that the stall inspector does not call
// a rank silent that works on the cache's fast path: in steady state ranks
// send no request lists, and the coordinator sees submissions only here.
//
// It is the one signal rank 0 has: a cached request that some ranks hold
// and others do not shows in no bit vector, and reaches the coordinator only
// when its rank's inspector moves it to negotiation after the warning time
// (see stall.Check, whose silent line therefore says what "nothing"
// covers). It costs one comparison per cycle on rank 0.
func (l *loop) noteCachedProgress(now time.Time, cached int) {
	if l.coord != nil && cached > 0 {
		l.coord.TouchAll(now)
	}
}
