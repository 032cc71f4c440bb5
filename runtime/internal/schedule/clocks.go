package schedule

import "time"

// Clocks are one rank's timers on a locked schedule: when it last joined a
// header, since when the current unit has been ready without being
// performed, and since when a caller has waited on an incomplete unit. The
// caller gives the time; Clocks turn it into the Local that Choose decides
// on, and into the time an idle rank looks again (Wake).
type Clocks struct {
	lastHeader time.Time
	readySince time.Time // zero: not ready, or performed since
	stuckSince time.Time // zero: no caller waits on an incomplete unit
}

// Locked starts the clocks when the schedule locks at now: a header counts
// as just joined, nothing ready or waited on yet.
func (c *Clocks) Locked(now time.Time) {
	*c = Clocks{lastHeader: now}
}

// Observe returns what this rank knows at now for Choose: deviant (a
// request outside the schedule, or this rank must stop), ready (every
// tensor of the current unit is queued) and hot (a caller waits on names in
// flight); it starts and stops the ready and stuck clocks accordingly.
func (c *Clocks) Observe(now time.Time, deviant, ready, hot bool) Local {
	loc := Local{Deviant: deviant, Ready: ready, SinceHeader: now.Sub(c.lastHeader)}
	switch {
	case ready:
		if c.readySince.IsZero() {
			c.readySince = now
		}
		loc.ReadyFor = now.Sub(c.readySince)
		c.stuckSince = time.Time{}
	case hot:
		if c.stuckSince.IsZero() {
			c.stuckSince = now
		}
		loc.StuckFor = now.Sub(c.stuckSince)
	default:
		c.stuckSince = time.Time{}
	}
	return loc
}

// Wake returns when a rank that chose not to join a header must look
// again, if no request wakes it first: at its heartbeat, or sooner when a
// caller's wait on an incomplete unit reaches t.Stuck.
func (c *Clocks) Wake(t Timing) time.Time {
	wake := c.lastHeader.Add(t.Heartbeat)
	if !c.stuckSince.IsZero() {
		if s := c.stuckSince.Add(t.Stuck); s.Before(wake) {
			wake = s
		}
	}
	return wake
}

// Joined records that a header returned at t.
func (c *Clocks) Joined(t time.Time) { c.lastHeader = t }

// Performed records that the ready units were performed: the rank is no
// longer waiting with a ready unit.
func (c *Clocks) Performed() { c.readySince = time.Time{} }

// Dissolved stops the ready and stuck clocks when the schedule dissolves.
func (c *Clocks) Dissolved() { c.readySince, c.stuckSince = time.Time{}, time.Time{} }
