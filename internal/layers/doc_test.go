package layers

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// docLayers reads the layer picture of docs/ARCHITECTURE.md (the first
// code block after "## Layers"): lines "NN  names  description", where
// names are comma-separated paths with {a, b} alternatives and a trailing
// "/*" for a folder and everything under it, and an indented line without
// a number continues the names of the line above. It returns each name,
// in the layer table's spelling ("/..." for "/*"), with its layer.
func docLayers(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "## Layers")
	if i < 0 {
		t.Fatal("docs/ARCHITECTURE.md has no \"## Layers\" section")
	}
	text = text[i:]
	start := strings.Index(text, "```\n")
	end := strings.Index(text[start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatal("docs/ARCHITECTURE.md's Layers section has no code block")
	}
	numbered := regexp.MustCompile(`^\s*(\d+)\s+(.*)$`)
	out := map[string]int{}
	cur := -1
	for _, line := range strings.Split(text[start+4:start+4+end], "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		names := strings.TrimSpace(line)
		if m := numbered.FindStringSubmatch(line); m != nil {
			cur, _ = strconv.Atoi(m[1])
			names = m[2]
		}
		if cur < 0 {
			t.Fatalf("docs/ARCHITECTURE.md: %q comes before any layer number", line)
		}
		// The description starts after a run of two or more spaces.
		if k := regexp.MustCompile(`\s{2,}`).FindStringIndex(names); k != nil {
			names = names[:k[0]]
		}
		for _, n := range expand(names) {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if strings.HasSuffix(n, "/*") {
				n = strings.TrimSuffix(n, "*") + "..."
			}
			out[n] = cur
		}
	}
	return out
}

// expand splits a comma-separated list whose items may hold one
// "{a, b}" group into the items with each alternative.
func expand(s string) []string {
	var items []string
	depth, from := 0, 0
	for i, r := range s {
		switch r {
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, s[from:i])
				from = i + 1
			}
		}
	}
	items = append(items, s[from:])
	var out []string
	for _, it := range items {
		it = strings.TrimSpace(it)
		open, close := strings.Index(it, "{"), strings.Index(it, "}")
		if open < 0 || close < open {
			out = append(out, it)
			continue
		}
		for _, alt := range strings.Split(it[open+1:close], ",") {
			out = append(out, it[:open]+strings.TrimSpace(alt)+it[close+1:])
		}
	}
	return out
}

// TestArchitectureMatchesLayers fails when docs/ARCHITECTURE.md's picture
// and the layer table disagree: a package missing from either, or at
// another layer.
func TestArchitectureMatchesLayers(t *testing.T) {
	doc := docLayers(t)
	var keys []string
	for k := range layer {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d, ok := doc[k]
		switch {
		case !ok:
			t.Errorf("%s (layer %d) is missing from docs/ARCHITECTURE.md's layer picture", k, layer[k])
		case d != layer[k]:
			t.Errorf("%s is at layer %d in docs/ARCHITECTURE.md and %d in the layer table", k, d, layer[k])
		}
	}
	for n, d := range doc {
		if _, ok := layer[n]; !ok {
			t.Errorf("docs/ARCHITECTURE.md puts %s at layer %d, but the layer table has no such entry", n, d)
		}
	}
}

func TestExpand(t *testing.T) {
	got := expand("mpi, runtime/internal/{cycle, gpuexec}, cmd/*")
	want := []string{"mpi", "runtime/internal/cycle", "runtime/internal/gpuexec", "cmd/*"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("expand: %q, want %q", got, want)
	}
}
