package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// caseBytes is the bytes each case allreduces (float32 elements times 4).
var caseBytes = map[string]float64{
	"64MiB":     64 << 20,
	"resnet50":  102228128,
	"4KiBx1000": 4096000,
	"4MB":       4096000,
}

// parseTimes reads the per-case median times (ms) from a path's output:
// hvdbench's runtime lines (impl=runtime ... case=C ... median_ms=M), the
// yardstick's (impl=raw-mpi ... median_ms=M) and the torch script's
// (transport=torch-gloo ... case=C ... ms=M).
func parseTimes(out string) map[string]float64 {
	res := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		// Lines may carry the launcher's prefix ("[0]<stdout>:" or
		// "[1,0]<stdout>:"): read the key=value words wherever they are.
		kv := map[string]string{}
		for _, w := range strings.Fields(line) {
			if i := strings.IndexByte(w, '='); i > 0 {
				k := w[:i]
				if j := strings.LastIndexByte(k, ':'); j >= 0 {
					k = k[j+1:]
				}
				kv[k] = w[i+1:]
			}
		}
		name := kv["case"]
		if name == "" {
			continue
		}
		if kv["impl"] == "direct-mpi" {
			continue
		}
		v := kv["median_ms"]
		if v == "" {
			v = kv["ms"]
		}
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			res[name] = ms
		}
	}
	return res
}

// figure is one path's time for one case, over rounds.
type figure struct {
	times []float64 // ms, one per round that ran
}

func (f figure) median() float64 {
	if len(f.times) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(f.times))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// bound is the ring's time (ms) for bytes across n ranks, one per node, on
// links of rate bits/s: each rank sends and receives 2(n-1)/n of the
// buffer, both ways at once.
func bound(bytes float64, n int, rate int64) float64 {
	if rate <= 0 || n < 2 {
		return 0
	}
	return 2 * float64(n-1) / float64(n) * bytes * 8 / float64(rate) * 1e3
}

// result is one configuration's figures: figs[path][case].
type result struct {
	nodes, perNode int
	rate           int64
	paths, cases   []string
	figs           map[string]map[string]*figure
}

func (r *result) add(path string, times map[string]float64) {
	if r.figs == nil {
		r.figs = map[string]map[string]*figure{}
	}
	if r.figs[path] == nil {
		r.figs[path] = map[string]*figure{}
	}
	for c, ms := range times {
		f := r.figs[path][c]
		if f == nil {
			f = &figure{}
			r.figs[path][c] = f
		}
		f.times = append(f.times, ms)
	}
}

// print writes one line per path and case, then the ratios: each path
// against the embedded transport, and 4KiBx1000 against 4MB.
func (r *result) print(w io.Writer, rateName string) {
	n := r.nodes * r.perNode
	for _, c := range r.cases {
		bytes := caseBytes[c]
		b := bound(bytes, r.nodes, r.rate)
		for _, p := range r.paths {
			f := r.figs[p][c]
			if f == nil || len(f.times) == 0 {
				continue
			}
			ms := f.median()
			algbw := bytes / (ms / 1e3) / 1e9
			busbw := algbw * 2 * float64(n-1) / float64(n)
			line := fmt.Sprintf("nodes=%d ranks_per_node=%d rate=%s path=%s case=%s bytes=%.0f rounds=%d time_ms=%.1f algbw_GBps=%.4f busbw_GBps=%.4f",
				r.nodes, r.perNode, rateName, p, c, bytes, len(f.times), ms, algbw, busbw)
			if r.rate > 0 {
				line += fmt.Sprintf(" link_share=%.3f", busbw*1e9*8/float64(r.rate))
				if r.perNode == 1 && b > 0 {
					line += fmt.Sprintf(" ring_bound_ms=%.1f of_bound=%.3f", b, b/ms)
				}
			}
			line += " rounds_ms=" + joinMs(f.times)
			fmt.Fprintln(w, line)
		}
	}
	base := r.figs["embedded"]
	for _, p := range r.paths {
		for _, c := range r.cases {
			f := r.figs[p][c]
			if f == nil || len(f.times) == 0 {
				continue
			}
			if base != nil && p != "embedded" && base[c] != nil && len(base[c].times) > 0 {
				fmt.Fprintf(w, "nodes=%d rate=%s case=%s ratio %s/embedded=%.3f\n", r.nodes, rateName, c, p, f.median()/base[c].median())
			}
		}
		small, one := r.figs[p]["4KiBx1000"], r.figs[p]["4MB"]
		if small != nil && one != nil && len(small.times) > 0 && len(one.times) > 0 {
			fmt.Fprintf(w, "nodes=%d rate=%s path=%s ratio 4KiBx1000/4MB=%.3f\n", r.nodes, rateName, p, small.median()/one.median())
		}
	}
}

func joinMs(ts []float64) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = strconv.FormatFloat(t, 'f', 1, 64)
	}
	return strings.Join(s, ",")
}
