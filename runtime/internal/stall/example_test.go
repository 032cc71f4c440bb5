package stall_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/stall"
)

// A three-rank job: rank 0 submitted fc1.w, rank 1 fc2.w (an unnamed op
// issued in another order), and rank 2 nothing since before the stall.
func Example() {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _ := stall.New(stall.Config{Warn: 60 * time.Second, Shutdown: 120 * time.Second})
	pending := map[string][]int{"allreduce.fc1.w": {0}, "allreduce.fc2.w": {1}}
	for name := range pending {
		s.Observe(name, t0)
	}
	last := []time.Time{t0, t0, t0.Add(-10 * time.Second)}
	rep, _ := s.Check(t0.Add(121*time.Second), 3, pending, last)
	// Horovod's text has a space before its first line break, which an
	// example's output cannot show.
	fmt.Println(strings.ReplaceAll(rep.Message, " \n", "\n"))
	// Output:
	// One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock.
	// Missing ranks:
	// 0!: [allreduce.fc2.w]
	// 1!: [allreduce.fc1.w]
	// 2!: [allreduce.fc1.w, allreduce.fc2.w]
	// One or more rank (marked by "!") is stalled for longer than 120 seconds. Will shutdown.
	// rank 0 submitted allreduce.fc1.w but never allreduce.fc2.w: do the names differ across ranks (an unnamed op issued in a different order, or a name built from a rank-dependent value)?
	// rank 1 submitted allreduce.fc2.w but never allreduce.fc1.w: do the names differ across ranks (an unnamed op issued in a different order, or a name built from a rank-dependent value)?
	// rank 2 submitted nothing for 131 s (no request negotiated, no cached collective completed): is it still loading data, or in a code path that makes no collective (an early exit, a different branch)?
}
