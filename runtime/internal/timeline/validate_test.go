package timeline

import (
	"strings"
	"testing"
)

// head declares rows 1 ("a") and 2 ("b") after the file header.
const head = `{"name":"process_name","ph":"M","pid":0,"args":{"start_time_since_epoch_in_micros":5}},
{"name":"process_name","ph":"M","pid":1,"args":{"name":"a"}},
{"name":"process_sort_index","ph":"M","pid":1,"args":{"sort_index":1}},
{"name":"process_name","ph":"M","pid":2,"args":{"name":"b"}},`

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name, events string
		want         string // part of the error; "" for a valid trace
	}{
		{"only metadata", `{"name":"process_name","ph":"M","pid":0,"args":{"start_time_since_epoch_in_micros":5}}`, ""},
		{"nested", `{"ph":"B","name":"ALLREDUCE","ts":1,"pid":1},{"ph":"B","name":"MPI_ALLREDUCE","ts":1,"pid":1},
			{"ph":"E","name":"","ts":2,"pid":1},{"ph":"E","ts":3,"pid":1,"args":{"dtype":"float32"}}`, ""},
		{"rows interleave", `{"ph":"B","name":"X","ts":5,"pid":1},{"ph":"B","name":"Y","ts":1,"pid":2},
			{"ph":"E","name":"Y","ts":2,"pid":2},{"ph":"E","name":"X","ts":6,"pid":1}`, ""},
		{"negotiation", `{"ph":"B","name":"NEGOTIATE_ALLREDUCE","ts":1,"pid":1},{"ph":"X","name":"0","ts":1,"dur":0,"pid":1},
			{"ph":"X","name":"1","ts":4,"dur":0,"pid":1},{"ph":"E","ts":4,"pid":1}`, ""},
		{"global instants", `{"ph":"i","name":"CYCLE_START","ts":1,"s":"g"},{"ph":"B","name":"X","ts":0,"pid":1},
			{"ph":"i","name":"CYCLE_START","ts":2,"s":"g"},{"ph":"E","ts":3,"pid":1}`, ""},
		{"threads are rows", `{"ph":"B","name":"X","ts":5,"pid":1,"tid":1},{"ph":"B","name":"Y","ts":1,"pid":1,"tid":2},
			{"ph":"E","ts":2,"pid":1,"tid":2},{"ph":"E","ts":6,"pid":1,"tid":1}`, ""},

		{"backwards B", `{"ph":"B","name":"ALLREDUCE","ts":5,"pid":1},{"ph":"B","name":"QUEUE","ts":3,"pid":1},
			{"ph":"E","ts":6,"pid":1},{"ph":"E","ts":6,"pid":1}`, "moving backward"},
		{"backwards E", `{"ph":"B","name":"X","ts":5,"pid":1},{"ph":"E","ts":4,"pid":1}`, "moving backward"},
		{"backwards X", `{"ph":"X","name":"0","ts":5,"dur":0,"pid":1},{"ph":"X","name":"1","ts":4,"dur":0,"pid":1}`, "moving backward"},
		{"backwards cycles", `{"ph":"i","name":"CYCLE_START","ts":2,"s":"g"},{"ph":"i","name":"CYCLE_START","ts":1,"s":"g"}`, "moving backward"},
		{"E without B", `{"ph":"E","ts":1,"pid":1}`, "without an open B"},
		{"E after balance", `{"ph":"B","name":"X","ts":1,"pid":1},{"ph":"E","ts":2,"pid":1},{"ph":"E","ts":3,"pid":1}`, "without an open B"},
		{"E on other row", `{"ph":"B","name":"X","ts":1,"pid":1},{"ph":"E","ts":2,"pid":2}`, "without an open B"},
		{"unclosed B", `{"ph":"B","name":"X","ts":1,"pid":1}`, "never closed"},
		{"unclosed inner", `{"ph":"B","name":"X","ts":1,"pid":1},{"ph":"B","name":"Y","ts":1,"pid":1},{"ph":"E","ts":2,"pid":1}`, "never closed"},
		{"E names another span", `{"ph":"B","name":"X","ts":1,"pid":1},{"ph":"B","name":"Y","ts":1,"pid":1},
			{"ph":"E","name":"X","ts":2,"pid":1},{"ph":"E","name":"Y","ts":2,"pid":1}`, `closes span "Y"`},
		{"X past its parent", `{"ph":"B","name":"X","ts":1,"pid":1},{"ph":"X","name":"0","ts":1,"dur":5,"pid":1},{"ph":"E","ts":2,"pid":1}`, "before a span inside it"},
		{"negative dur", `{"ph":"X","name":"0","ts":1,"dur":-1,"pid":1}`, "dur"},
		{"no dur", `{"ph":"X","name":"0","ts":1,"pid":1}`, "dur"},
		{"negative ts", `{"ph":"B","name":"X","ts":-1,"pid":1},{"ph":"E","ts":1,"pid":1}`, "ts"},
		{"no ts", `{"ph":"B","name":"X","pid":1},{"ph":"E","ts":1,"pid":1}`, "ts"},
		{"fractional ts", `{"ph":"B","name":"X","ts":1.5,"pid":1},{"ph":"E","ts":2,"pid":1}`, "ts"},
		{"string ts", `{"ph":"B","name":"X","ts":"1","pid":1},{"ph":"E","ts":2,"pid":1}`, "not an event object"},
		{"no ph", `{"name":"X","ts":1,"pid":1}`, "no ph"},
		{"unknown ph", `{"ph":"Q","name":"X","ts":1,"pid":1}`, "unsupported phase"},
		{"B without name", `{"ph":"B","ts":1,"pid":1},{"ph":"E","ts":1,"pid":1}`, "B without a name"},
		{"no pid", `{"ph":"B","name":"X","ts":1},{"ph":"E","ts":1}`, "without pid"},
		{"undeclared pid", `{"ph":"B","name":"X","ts":1,"pid":7},{"ph":"E","ts":1,"pid":7}`, "before its process_name"},
		{"sort index only", `{"name":"process_sort_index","ph":"M","pid":3,"args":{"sort_index":3}},{"ph":"X","name":"0","ts":1,"dur":0,"pid":3}`, "before its process_name"},
		{"fractional pid", `{"ph":"X","name":"0","ts":1,"dur":0,"pid":1.5}`, "pid"},
		{"unknown metadata", `{"name":"colour","ph":"M","pid":1,"args":{"c":1}}`, "unknown metadata"},
		{"metadata without args", `{"name":"process_name","ph":"M","pid":3}`, "without args"},
		{"metadata args not object", `{"name":"process_name","ph":"M","pid":3,"args":[1]}`, "not an object"},
		{"process_name without name", `{"name":"process_name","ph":"M","pid":3,"args":{"nom":"x"}}`, "args.name"},
		{"row named twice", `{"name":"process_name","ph":"M","pid":1,"args":{"name":"c"}}`, "named twice"},
		{"sort_index not a number", `{"name":"process_sort_index","ph":"M","pid":1,"args":{"sort_index":"1"}}`, "sort_index"},
		{"metadata without pid", `{"name":"process_name","ph":"M","args":{"name":"c"}}`, "without pid"},
		{"instant scope", `{"ph":"i","name":"x","ts":1,"s":"z","pid":1}`, "scope"},
		{"E args not object", `{"ph":"B","name":"X","ts":1,"pid":1},{"ph":"E","ts":2,"pid":1,"args":3}`, "not an object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := "[\n" + head + "\n" + c.events + "\n]\n"
			if strings.HasPrefix(c.name, "only") {
				in = "[" + c.events + "]"
			}
			err := Validate(strings.NewReader(in))
			switch {
			case c.want == "" && err != nil:
				t.Errorf("valid trace rejected: %v", err)
			case c.want != "" && err == nil:
				t.Errorf("accepted, want an error with %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Errorf("error %q, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestValidateNotAnArray(t *testing.T) {
	for _, in := range []string{``, `{}`, `[{"ph":"B"`, `[1]`, `["x"]`, `[] []`, `[{}]`} {
		if err := Validate(strings.NewReader(in)); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzValidate: the validator never panics, and whatever it accepts it
// accepts again (it is a pure function of its input).
func FuzzValidate(f *testing.F) {
	f.Add("[" + head + `{"ph":"B","name":"X","ts":1,"pid":1},{"ph":"E","ts":2,"pid":1}]`)
	f.Add(`[{"ph":"E","ts":1,"pid":1}]`)
	f.Fuzz(func(t *testing.T, in string) {
		err1 := Validate(strings.NewReader(in))
		err2 := Validate(strings.NewReader(in))
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %v, %v", err1, err2)
		}
	})
}
