package mpi

import (
	"reflect"
	"testing"
)

func TestSpans(t *testing.T) {
	tests := []struct {
		n, limit int
		want     []span
	}{
		{0, 5, []span{}},
		{3, 5, []span{{0, 3}}},
		{5, 5, []span{{0, 5}}},
		{6, 5, []span{{0, 5}, {5, 1}}},
		{12, 4, []span{{0, 4}, {4, 4}, {8, 4}}},
		{maxCount + 2, maxCount, []span{{0, maxCount}, {maxCount, 2}}},
		{3*maxCount + 1, maxCount, []span{{0, maxCount}, {maxCount, maxCount}, {2 * maxCount, maxCount}, {3 * maxCount, 1}}},
	}
	for _, tt := range tests {
		got := spans(tt.n, tt.limit)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("spans(%d, %d) = %v, want %v", tt.n, tt.limit, got, tt.want)
		}
		sum := 0
		for _, s := range got {
			if s.off != sum || s.n <= 0 || s.n > tt.limit {
				t.Errorf("spans(%d, %d): bad span %v", tt.n, tt.limit, s)
			}
			sum += s.n
		}
		if sum != tt.n {
			t.Errorf("spans(%d, %d) cover %d elements", tt.n, tt.limit, sum)
		}
	}
}

func TestFitsCounts(t *testing.T) {
	tests := []struct {
		counts []int
		limit  int
		want   bool
	}{
		{nil, 10, true},
		{[]int{3, 4, 3}, 10, true},
		{[]int{3, 4, 4}, 10, false},
		{[]int{11}, 10, false},
		{[]int{maxCount, 0}, maxCount, true},
		{[]int{maxCount, 1}, maxCount, false},
	}
	for _, tt := range tests {
		if got := fitsCounts(tt.counts, tt.limit); got != tt.want {
			t.Errorf("fitsCounts(%v, %d) = %v, want %v", tt.counts, tt.limit, got, tt.want)
		}
	}
}
