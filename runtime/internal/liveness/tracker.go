package liveness

import (
	"slices"
	"time"
)

// Tracker records when each rank was last heard from and says which ones
// have been silent for longer than a timeout. It has no clock and no I/O;
// it is not safe for concurrent use.
type Tracker struct {
	last []time.Time // when each tracked rank was last heard from
	on   []bool      // tracked: Track was called, and the rank has not left
}

// NewTracker returns a tracker of size ranks, none of them tracked yet.
func NewTracker(size int) *Tracker {
	return &Tracker{last: make([]time.Time, size), on: make([]bool, size)}
}

// Track starts tracking rank r, as heard from at now.
func (t *Tracker) Track(r int, now time.Time) {
	t.on[r] = true
	t.last[r] = now
}

// Heard records that rank r was heard from at now.
func (t *Tracker) Heard(r int, now time.Time) {
	if now.After(t.last[r]) {
		t.last[r] = now
	}
}

// Gone records that rank r left (its connection closed): it is no longer
// tracked.
func (t *Tracker) Gone(r int) { t.on[r] = false }

// Silent returns the tracked ranks not heard from for longer than timeout
// at now, in rank order, with how long each has been silent.
func (t *Tracker) Silent(now time.Time, timeout time.Duration) []Silence {
	var out []Silence
	for r, l := range t.last {
		if !t.on[r] {
			continue
		}
		if d := now.Sub(l); d > timeout {
			out = append(out, Silence{Rank: r, For: d})
		}
	}
	return slices.Clip(out)
}

// Silence is a rank that has sent nothing for a while.
type Silence struct {
	Rank int
	For  time.Duration
}
