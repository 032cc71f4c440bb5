package mpi

import "math"

// maxCount is the largest element count one MPI call takes (a C int).
const maxCount = math.MaxInt32

// span is a range of elements [off, off+n) handled by one MPI call.
type span struct{ off, n int }

// spans splits n elements into consecutive chunks of at most limit elements
// (limit > 0). Zero elements give no chunks.
func spans(n, limit int) []span {
	if limit <= 0 {
		panic("mpi: spans with a non-positive limit")
	}
	out := make([]span, 0, (n+limit-1)/limit)
	for off := 0; off < n; off += limit {
		out = append(out, span{off, min(limit, n-off)})
	}
	return out
}

// fitsCounts reports whether counts and their running sums (the
// displacements of a v-collective) all fit in a C int, checked against
// limit.
func fitsCounts(counts []int, limit int) bool {
	total := 0
	for _, c := range counts {
		if c > limit {
			return false
		}
		total += c
		if total > limit {
			return false
		}
	}
	return true
}
