package timeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// Span is one span of a trace: a B event and the E that closed it, or an X
// event.
type Span struct {
	Name       string
	Begin, End int64 // microseconds since the trace's start
	// Depth is the number of spans of the row open around it (0: top
	// level).
	Depth int
	Args  map[string]any // the E's (or X's) args, nil if none
}

// Row is the events of one process id: a tensor name's row.
type Row struct {
	Pid   int
	Name  string // from the process_name metadata
	Spans []Span // in the order they ended
}

// Trace is a parsed and validated trace file.
type Trace struct {
	Rows   map[int]*Row // by pid; pid 0 (the header) has no spans
	Cycles int          // CYCLE_START instants
}

// Row returns the row named name, or nil.
func (tr *Trace) Row(name string) *Row {
	for _, r := range tr.Rows {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// rawEvent is one element of the trace array; pointers tell absent fields.
type rawEvent struct {
	Name *string         `json:"name"`
	Ph   *string         `json:"ph"`
	Ts   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	Pid  *float64        `json:"pid"`
	Tid  *float64        `json:"tid"`
	S    *string         `json:"s"`
	Args json.RawMessage `json:"args"`
}

type rowKey struct{ pid, tid int64 }

type frame struct {
	name  string
	begin int64
	inner int64 // the latest end of a span inside it
}

type rowState struct {
	last  int64
	any   bool
	stack []frame
}

// Validate reads a trace file and reports the first way in which it is
// not a well-formed, properly nested trace (see Read).
func Validate(r io.Reader) error {
	_, err := Read(r)
	return err
}

// Read parses a trace file and checks it: a JSON array of event objects;
// metadata events (ph M) name a known kind and carry well-formed args;
// every other event has a non-negative integral ts; on each row (pid and
// tid) the events' times never decrease in file order; each E closes the
// innermost open B of its row (and carries its name, if any); no span is
// left open at the end; X events have a non-negative dur and end before the
// span around them; every row with events was named by a process_name
// event first. Global instants (ph i with s "g") form a row of their own.
func Read(r io.Reader) (*Trace, error) {
	var events []json.RawMessage
	dec := json.NewDecoder(r)
	if err := dec.Decode(&events); err != nil {
		return nil, fmt.Errorf("timeline: not a JSON array: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("timeline: data after the JSON array")
	}
	tr := &Trace{Rows: make(map[int]*Row)}
	rows := make(map[rowKey]*rowState)
	var global rowState
	for i, raw := range events {
		var e rawEvent
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("timeline: event %d: not an event object: %w", i, err)
		}
		if err := tr.check(i, &e, rows, &global); err != nil {
			return nil, err
		}
	}
	for k, st := range rows {
		if n := len(st.stack); n > 0 {
			return nil, fmt.Errorf("timeline: pid %d: span %q (at %d) is never closed", k.pid, st.stack[n-1].name, st.stack[n-1].begin)
		}
	}
	return tr, nil
}

func integral(f *float64) (int64, bool) {
	if f == nil || *f != math.Trunc(*f) || math.Abs(*f) > 1<<53 {
		return 0, false
	}
	return int64(*f), true
}

func (tr *Trace) check(i int, e *rawEvent, rows map[rowKey]*rowState, global *rowState) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("timeline: event %d: %s", i, fmt.Sprintf(format, args...))
	}
	if e.Ph == nil {
		return bad("no ph")
	}
	ph := *e.Ph
	pid, hasPid := integral(e.Pid)
	if e.Pid != nil && !hasPid {
		return bad("pid %v is not an integer", *e.Pid)
	}
	tid, hasTid := integral(e.Tid)
	if e.Tid != nil && !hasTid {
		return bad("tid %v is not an integer", *e.Tid)
	}
	if ph == "M" {
		if !hasPid {
			return bad("metadata without pid")
		}
		return tr.metadata(int(pid), e, bad)
	}
	ts, ok := integral(e.Ts)
	if !ok || ts < 0 {
		return bad("ph %s: ts missing, not an integer or negative", ph)
	}
	name := ""
	if e.Name != nil {
		name = *e.Name
	}
	var st *rowState
	switch {
	case (ph == "i" || ph == "I") && e.S != nil && *e.S == "g":
		st = global
		if name == "CYCLE_START" {
			tr.Cycles++
		}
	case !hasPid:
		return bad("ph %s without pid", ph)
	default:
		row := tr.Rows[int(pid)]
		if row == nil || row.Name == "" && pid != 0 {
			return bad("pid %d has events before its process_name", pid)
		}
		k := rowKey{pid, tid}
		if st = rows[k]; st == nil {
			st = &rowState{}
			rows[k] = st
		}
	}
	if st.any && ts < st.last {
		return bad("pid %d: ts %d before the row's previous event at %d (timestamps moving backward)", pid, ts, st.last)
	}
	st.any, st.last = true, ts
	return tr.event(ph, name, pid, ts, e, st, st == global, bad)
}

// event applies one B, E, X or instant event at ts to its row's state st
// (global: the row of global instants), adding the spans it closes to the
// row of pid.
func (tr *Trace) event(ph, name string, pid, ts int64, e *rawEvent, st *rowState, global bool, bad func(string, ...any) error) error {
	row := tr.Rows[int(pid)]
	switch ph {
	case "B":
		if name == "" {
			return bad("B without a name")
		}
		st.stack = append(st.stack, frame{name: name, begin: ts})
	case "E":
		n := len(st.stack)
		if n == 0 {
			return bad("pid %d: E at %d without an open B", pid, ts)
		}
		f := st.stack[n-1]
		if name != "" && name != f.name {
			return bad("pid %d: E %q closes span %q", pid, name, f.name)
		}
		if ts < f.inner {
			return bad("pid %d: span %q ends at %d, before a span inside it (%d)", pid, f.name, ts, f.inner)
		}
		st.stack = st.stack[:n-1]
		args, err := argsObject(e.Args)
		if err != nil {
			return bad("%v", err)
		}
		row.Spans = append(row.Spans, Span{Name: f.name, Begin: f.begin, End: ts, Depth: n - 1, Args: args})
		if n > 1 {
			st.stack[n-2].inner = max(st.stack[n-2].inner, ts)
		}
	case "X":
		dur, ok := integral(e.Dur)
		if !ok || dur < 0 {
			return bad("pid %d: X %q: dur missing, not an integer or negative", pid, name)
		}
		args, err := argsObject(e.Args)
		if err != nil {
			return bad("%v", err)
		}
		if !global {
			row.Spans = append(row.Spans, Span{Name: name, Begin: ts, End: ts + dur, Depth: len(st.stack), Args: args})
		}
		if n := len(st.stack); n > 0 {
			st.stack[n-1].inner = max(st.stack[n-1].inner, ts+dur)
		}
	case "i", "I":
		if e.S != nil && *e.S != "g" && *e.S != "p" && *e.S != "t" {
			return bad("instant with scope %q", *e.S)
		}
	default:
		return bad("unsupported phase %q", ph)
	}
	return nil
}

func argsObject(raw json.RawMessage) (map[string]any, error) {
	if raw == nil {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("args %s is not an object", raw)
	}
	return m, nil
}

// metadata checks one ph M event and records the row's name.
func (tr *Trace) metadata(pid int, e *rawEvent, bad func(string, ...any) error) error {
	if e.Name == nil {
		return bad("metadata without a name")
	}
	args, err := argsObject(e.Args)
	if err != nil {
		return bad("%v", err)
	}
	if args == nil {
		return bad("metadata %q without args", *e.Name)
	}
	row := tr.Rows[pid]
	if row == nil {
		row = &Row{Pid: pid}
		tr.Rows[pid] = row
	}
	switch *e.Name {
	case "process_name":
		if pid == 0 {
			if _, ok := args["start_time_since_epoch_in_micros"].(float64); ok {
				return nil
			}
		}
		s, ok := args["name"].(string)
		if !ok || s == "" {
			return bad("process_name of pid %d: args.name missing or not a string", pid)
		}
		if row.Name != "" {
			return bad("pid %d named twice (%q, %q)", pid, row.Name, s)
		}
		row.Name = s
	case "process_sort_index", "thread_sort_index":
		if _, ok := args["sort_index"].(float64); !ok {
			return bad("%s of pid %d: args.sort_index missing or not a number", *e.Name, pid)
		}
	case "thread_name":
		if _, ok := args["name"].(string); !ok {
			return bad("thread_name of pid %d: args.name missing or not a string", pid)
		}
	default:
		return bad("unknown metadata %q", *e.Name)
	}
	return nil
}
