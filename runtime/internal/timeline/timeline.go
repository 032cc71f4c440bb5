package timeline

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// Timeline records events into a trace file. It is used by one goroutine.
type Timeline struct {
	f          *os.File
	off        int64 // where the closing "\n]" starts
	any        bool  // at least one event written
	start      time.Time
	pids       map[string]int
	buf        []byte
	scratch    []byte
	markCycles bool
}

// Open creates (truncating) the trace file at path; times are measured from
// start. With markCycles, MarkCycle records CYCLE_START instants.
func Open(path string, start time.Time, markCycles bool) (*Timeline, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	t := &Timeline{f: f, start: start, pids: make(map[string]int), markCycles: markCycles}
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

func (t *Timeline) ts(now time.Time) int64 { return now.Sub(t.start).Microseconds() }

// pid returns the row of a tensor name, declaring it on first use.
func (t *Timeline) pid(name string) int {
	if p, ok := t.pids[name]; ok {
		return p
	}
	p := len(t.pids) + 1
	t.pids[name] = p
	b := fmt.Appendf(nil, `{"name":"process_name","ph":"M","pid":%d,"args":{"name":%s}}`, p, strconv.Quote(name))
	t.event(b)
	t.event(fmt.Appendf(nil, `{"name":"process_sort_index","ph":"M","pid":%d,"args":{"sort_index":%d}}`, p, p))
	return p
}

func (t *Timeline) span(ph byte, name, label string, now time.Time, args string) {
	b := fmt.Appendf(t.scratch[:0], `{"ph":"%c","name":%s,"ts":%d,"pid":%d`, ph, strconv.Quote(label), t.ts(now), t.pid(name))
	if args != "" {
		b = append(b, `,"args":`...)
		b = append(b, args...)
	}
	b = append(b, '}')
	t.event(b)
	t.scratch = b
}

// NegotiateStart opens the negotiation span of name for an operation such
// as "ALLREDUCE" (the span is NEGOTIATE_ALLREDUCE).
func (t *Timeline) NegotiateStart(name, op string, now time.Time) {
	t.span('B', name, "NEGOTIATE_"+op, now, "")
}

// NegotiateRankReady records that rank submitted name.
func (t *Timeline) NegotiateRankReady(name string, rank int, now time.Time) {
	b := fmt.Appendf(nil, `{"ph":"X","name":"%d","ts":%d,"dur":0,"pid":%d}`, rank, t.ts(now), t.pid(name))
	t.event(b)
}

// NegotiateEnd closes the negotiation span of name.
func (t *Timeline) NegotiateEnd(name string, now time.Time) { t.span('E', name, "", now, "") }

// Start opens the processing span of name for op ("ALLREDUCE").
func (t *Timeline) Start(name, op string, now time.Time) { t.span('B', name, op, now, "") }

// ActivityStart opens a nested activity span ("MEMCPY_IN_FUSION_BUFFER").
func (t *Timeline) ActivityStart(name, activity string, now time.Time) {
	t.span('B', name, activity, now, "")
}

// ActivityEnd closes the innermost open activity of name.
func (t *Timeline) ActivityEnd(name string, now time.Time) { t.span('E', name, "", now, "") }

// End closes the processing span of name, recording its dtype and shape.
func (t *Timeline) End(name, dtype, shape string, now time.Time) {
	args := fmt.Sprintf(`{"dtype":%s,"shape":%s}`, strconv.Quote(dtype), strconv.Quote(shape))
	t.span('E', name, "", now, args)
}

// MarkCycle records a CYCLE_START instant when cycle marking is on.
func (t *Timeline) MarkCycle(now time.Time) {
	if !t.markCycles {
		return
	}
	t.event(fmt.Appendf(nil, `{"ph":"i","name":"CYCLE_START","ts":%d,"s":"g"}`, t.ts(now)))
}

// Flush writes the buffered events, leaving the file a complete JSON array.
func (t *Timeline) Flush() error {
	if len(t.buf) == 0 && t.any {
		return nil
	}
	t.buf = append(t.buf, "\n]\n"...)
	n := len(t.buf) - 3
	if _, err := t.f.WriteAt(t.buf, t.off); err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	t.off += int64(n)
	if n > 0 {
		t.any = true
	}
	t.buf = t.buf[:0]
	return nil
}

// Close flushes and closes the file.
func (t *Timeline) Close() error {
	err := t.Flush()
	if cerr := t.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("timeline: %w", cerr)
	}
	return err
}
