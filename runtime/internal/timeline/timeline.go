package timeline

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// negotiatePrefix starts the label of every negotiation span.
const negotiatePrefix = "NEGOTIATE_"

// Queue is the label of the span drawn for the time a cached operation
// waited between its submission and its start (see Start).
const Queue = "QUEUE"

// track is the row of one tensor name.
type track struct {
	pid  int
	last int64    // ts of the row's latest event
	open []string // labels of the open spans, innermost last
	// negotiated: a negotiation event was drawn since the row's last
	// operation started (so the next operation waited in a negotiation,
	// not in the queue alone).
	negotiated bool
}

// Timeline records events into a trace file. It is used by one goroutine.
//
// Every row (a tensor name's "process") gets events in non-decreasing time
// order, and its B and E events nest: each E closes the row's innermost
// open span, and Close ends the spans still open. The callers are expected
// to report times in that order; as a guard, a time earlier than the row's
// latest is drawn at the latest (and counted, see Repairs), and an end with
// no open span is dropped (counted too).
type Timeline struct {
	f          *os.File
	off        int64 // where the closing "\n]" starts
	any        bool  // at least one event written
	start      time.Time
	tracks     map[string]*track
	cycleTS    int64 // ts of the latest CYCLE_START
	buf        []byte
	scratch    []byte
	markCycles bool
	repairs    int
}

// Open creates (truncating) the trace file at path; times are measured from
// start, and times before start are drawn at start. With markCycles,
// MarkCycle records CYCLE_START instants.
func Open(path string, start time.Time, markCycles bool) (*Timeline, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	t := &Timeline{f: f, start: start, tracks: make(map[string]*track), markCycles: markCycles}
	head := []byte("[\n")
	if _, err := f.Write(head); err != nil {
		f.Close()
		return nil, fmt.Errorf("timeline: %w", err)
	}
	t.off = int64(len(head))
	t.event(fmt.Appendf(nil, `{"name":"process_name","ph":"M","pid":0,"args":{"start_time_since_epoch_in_micros":%d}}`, start.UnixMicro()))
	if err := t.Flush(); err != nil {
		f.Close()
		return nil, err
	}
	return t, nil
}

func (t *Timeline) event(e []byte) {
	if t.any || len(t.buf) > 0 {
		t.buf = append(t.buf, ",\n"...)
	}
	t.buf = append(t.buf, e...)
}

// micros is now in microseconds since the start, at least 0.
func (t *Timeline) micros(now time.Time) int64 {
	return max(now.Sub(t.start).Microseconds(), 0)
}

// ts returns now's time on tr's row, which it becomes the latest of.
func (t *Timeline) ts(tr *track, now time.Time) int64 {
	us := t.micros(now)
	if us < tr.last {
		t.repairs++
		us = tr.last
	}
	tr.last = us
	return us
}

// track returns the row of a tensor name, declaring it on first use.
func (t *Timeline) track(name string) *track {
	if tr, ok := t.tracks[name]; ok {
		return tr
	}
	tr := &track{pid: len(t.tracks) + 1}
	t.tracks[name] = tr
	t.event(fmt.Appendf(nil, `{"name":"process_name","ph":"M","pid":%d,"args":{"name":%s}}`, tr.pid, strconv.Quote(name)))
	t.event(fmt.Appendf(nil, `{"name":"process_sort_index","ph":"M","pid":%d,"args":{"sort_index":%d}}`, tr.pid, tr.pid))
	return tr
}

// write appends one event of phase ph, label and optional args (a JSON
// object) at us on tr's row.
func (t *Timeline) write(tr *track, ph byte, label string, us int64, args string) {
	b := fmt.Appendf(t.scratch[:0], `{"ph":"%c","name":%s,"ts":%d,"pid":%d`, ph, strconv.Quote(label), us, tr.pid)
	if args != "" {
		b = append(b, `,"args":`...)
		b = append(b, args...)
	}
	b = append(b, '}')
	t.event(b)
	t.scratch = b
}

func (t *Timeline) begin(tr *track, label string, now time.Time) {
	t.write(tr, 'B', label, t.ts(tr, now), "")
	tr.open = append(tr.open, label)
}

// end closes tr's innermost open span.
func (t *Timeline) end(tr *track, now time.Time, args string) {
	if len(tr.open) == 0 {
		t.repairs++
		return
	}
	label := tr.open[len(tr.open)-1]
	tr.open = tr.open[:len(tr.open)-1]
	t.write(tr, 'E', label, t.ts(tr, now), args)
}

// NegotiateStart opens the negotiation span of name for an operation such
// as "ALLREDUCE" (the span is NEGOTIATE_ALLREDUCE): the first rank's
// request for it reached the coordinator.
func (t *Timeline) NegotiateStart(name, op string, now time.Time) {
	tr := t.track(name)
	tr.negotiated = true
	t.begin(tr, negotiatePrefix+op, now)
}

// NegotiateRankReady records that rank submitted name: an instant (an X
// event of no duration, named by the rank) inside the negotiation span.
func (t *Timeline) NegotiateRankReady(name string, rank int, now time.Time) {
	tr := t.track(name)
	tr.negotiated = true
	us := t.ts(tr, now)
	t.event(fmt.Appendf(nil, `{"ph":"X","name":"%d","ts":%d,"dur":0,"pid":%d}`, rank, us, tr.pid))
}

// NegotiateEnd closes the negotiation span of name. A negotiation that began
// before this timeline was opened (see Runtime.StartTimeline) has no span
// here, and its end draws nothing.
func (t *Timeline) NegotiateEnd(name string, now time.Time) {
	tr := t.track(name)
	tr.negotiated = true
	if n := len(tr.open); n == 0 || !strings.HasPrefix(tr.open[n-1], negotiatePrefix) {
		return
	}
	t.end(tr, now, "")
}

// Start opens the processing span of name for op ("ALLREDUCE") at now.
//
// When the name was not negotiated since its previous operation (its
// response came from the response cache) and enqueued is not zero, a QUEUE
// span from enqueued (when this rank submitted it) to now is drawn first,
// on its own, just before the operation's span: the time the tensor waited.
// A negotiated name's wait is its NEGOTIATE span, which lies between its
// submission and now on the same row, so no QUEUE span is drawn for it.
func (t *Timeline) Start(name, op string, enqueued, now time.Time) {
	tr := t.track(name)
	if !tr.negotiated && !enqueued.IsZero() && len(tr.open) == 0 && t.micros(enqueued) >= tr.last {
		t.begin(tr, Queue, enqueued)
		t.end(tr, now, "")
	}
	tr.negotiated = false
	t.begin(tr, op, now)
}

// ActivityStart opens a nested activity span ("MEMCPY_IN_FUSION_BUFFER")
// inside name's processing span.
func (t *Timeline) ActivityStart(name, activity string, now time.Time) {
	t.begin(t.track(name), activity, now)
}

// ActivityEnd closes the innermost open activity of name.
func (t *Timeline) ActivityEnd(name string, now time.Time) { t.end(t.track(name), now, "") }

// End closes the processing span of name, recording its dtype and shape.
func (t *Timeline) End(name, dtype, shape string, now time.Time) {
	args := fmt.Sprintf(`{"dtype":%s,"shape":%s}`, strconv.Quote(dtype), strconv.Quote(shape))
	t.end(t.track(name), now, args)
}

// MarkCycle records a CYCLE_START instant when cycle marking is on.
func (t *Timeline) MarkCycle(now time.Time) {
	if !t.markCycles {
		return
	}
	us := t.micros(now)
	if us < t.cycleTS {
		t.repairs++
		us = t.cycleTS
	}
	t.cycleTS = us
	t.event(fmt.Appendf(nil, `{"ph":"i","name":"CYCLE_START","ts":%d,"s":"g"}`, us))
}

// Repairs returns how many events were out of order (drawn at their row's
// latest time) or ended no open span (dropped). Callers that report times
// in order keep it at zero; a non-zero count is a bug in the caller.
func (t *Timeline) Repairs() int { return t.repairs }

// Flush writes the buffered events, leaving the file a complete JSON array.
func (t *Timeline) Flush() error {
	if len(t.buf) == 0 && t.any {
		return nil
	}
	t.buf = append(t.buf, "\n]\n"...)
	n := len(t.buf) - 3
	if _, err := t.f.WriteAt(t.buf, t.off); err != nil {
		t.buf = t.buf[:n]
		return fmt.Errorf("timeline: %w", err)
	}
	t.off += int64(n)
	if n > 0 {
		t.any = true
	}
	t.buf = t.buf[:0]
	return nil
}

// Close ends the spans still open at now (a negotiation that some rank has
// not joined yet, an operation cut short by a failure), flushes and closes
// the file.
func (t *Timeline) Close(now time.Time) error {
	open := make([]*track, 0, len(t.tracks))
	for _, tr := range t.tracks {
		if len(tr.open) > 0 {
			open = append(open, tr)
		}
	}
	slices.SortFunc(open, func(a, b *track) int { return a.pid - b.pid })
	for _, tr := range open {
		for len(tr.open) > 0 {
			t.end(tr, now, "")
		}
	}
	err := t.Flush()
	if cerr := t.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("timeline: %w", cerr)
	}
	return err
}
