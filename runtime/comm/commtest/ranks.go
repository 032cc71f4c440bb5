package commtest

import (
	"fmt"
	"sync"
)

// OnRanks runs f once per element of ranks, each call in its own goroutine
// (rank i gets ranks[i]), and returns once every call has returned, with
// rank i's error at index i; a panic in f becomes that rank's error. It is
// the one way the project's tests run N ranks in one process: ranks may be
// the members of a group (memcomm.NewGroup), Runtimes (hvd.StartLocal), or just
// the rank numbers (Ranks(n)).
func OnRanks[T any](ranks []T, f func(x T) error) []error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, x := range ranks {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("panic: %v", p)
				}
			}()
			errs[r] = f(x)
		})
	}
	wg.Wait()
	return errs
}

// Ranks returns the rank numbers 0 to n-1, for OnRanks when a test needs
// only the rank.
func Ranks(n int) []int {
	rs := make([]int, n)
	for i := range rs {
		rs[i] = i
	}
	return rs
}
