package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestRunTiny runs the command with tiny sizes and checks that the table
// has its rows and that every figure in them is positive. It times
// nothing against a limit.
func TestRunTiny(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"--runs", "3", "--steps", "2", "--commits", "2", "--reps", "1",
		"--hidden", "8", "--batch", "4", "--state-mib", "1", "--tensors", "4"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"medians of 3 runs", "MLP [784 8 10], 6370 float32 parameters", "1 MiB state: 131072 float32 parameters in 4 tensors"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	// Row name → the columns that hold a number (time, rate, ratio).
	rows := map[string][]int{
		"MNIST step":   {1, 2},
		"MNIST commit": {1, 2, 4, 6},
		"1 MiB commit": {1, 2, 4, 5, 6},
	}
	cols := regexp.MustCompile(`\s{2,}`)
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		f := cols.Split(strings.TrimSpace(line), -1)
		numeric, ok := rows[f[0]]
		if !ok {
			continue
		}
		seen[f[0]] = true
		if len(f) != 8 {
			t.Errorf("row %q has %d columns, want 8: %q", f[0], len(f), line)
			continue
		}
		for _, c := range numeric {
			num := strings.TrimRight(strings.Fields(f[c])[0], "%x")
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || v <= 0 {
				t.Errorf("row %q column %d is %q, not a positive number", f[0], c, f[c])
			}
		}
	}
	for name := range rows {
		if !seen[name] {
			t.Errorf("no %q row in:\n%s", name, text)
		}
	}
	if !regexp.MustCompile(`< 5% \((met|missed)\)`).MatchString(text) {
		t.Errorf("no verdict on the 5%% goal in:\n%s", text)
	}
}

func TestParseErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--runs", "0"},
		{"--hidden", "8,x"},
		{"--hidden", "0"},
		{"--state-mib", "-1"},
		{"extra"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
	var out bytes.Buffer
	if err := run([]string{"--state-mib", "1", "--tensors", "3"}, &out); err == nil {
		t.Error("a 1 MiB state in 3 tensors was accepted")
	}
}
