package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// row is one job's figures, for the tables.
type row struct {
	np  int
	err string
	// Start-up, in milliseconds: launch to the first rank's start, the
	// first rank's start to the last's, the last rank's start to the last
	// hvd.Init's return, the slowest rank's hvd.Init, and the last Init's
	// return to the last first step's end; then the end of the hold to the
	// launchers' exit (the last report and hvd.Shutdown).
	spawn, ranksUp, init, initMax, firstStep, teardown float64
	// Steps, in milliseconds: a cached step, a step with a cached probe
	// allreduce and one with a fresh name (a negotiation miss), and the
	// CPU per step and rank.
	step, probeCached, probeMiss, cpuStep float64
	// Per rank, in the hold.
	ranks                                 int
	rssMed, rssMax, shmemMax              float64 // MiB
	fdsMax, socketsMax, threadsMax, goMax int
	shmHeld                               float64 // MiB, the whole job's
	launcherCPU, launcherRSS, jobCPU      float64 // s, MiB, s
	leftovers                             []string
	allreduce                             float64 // the yardstick's median, ms
}

// keyValues parses rank 0's key=value lines.
func keyValues(lines []string) map[string]string {
	kv := make(map[string]string)
	for _, l := range lines {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.ContainsAny(k, " \t") {
			kv[k] = v
		}
	}
	return kv
}

func number(kv map[string]string, k string) float64 {
	v, err := strconv.ParseFloat(kv[k], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// newRow computes a job's row from what was observed.
func newRow(np int, o *observed) row {
	r := row{np: np, leftovers: o.leftovers, shmHeld: float64(o.shmHeld) / (1 << 20), jobCPU: o.jobCPU}
	kv := keyValues(o.out)
	r.step, r.cpuStep = number(kv, "step_ms"), number(kv, "cpu_ms_per_step_per_rank")
	r.probeCached, r.probeMiss = number(kv, "probe_cached_step_ms"), number(kv, "probe_miss_step_ms")
	r.startup(kv, np, float64(o.launch.UnixMicro()))
	r.teardown = float64(o.exit.Sub(o.holdEnd).Microseconds()) / 1e3
	r.resources(o)
	goMax := 0.0
	for rank := range np {
		goMax = max(goMax, number(kv, fmt.Sprintf("rank.%d.goroutines", rank)))
	}
	r.goMax = int(goMax)
	return r
}

// startup fills the start-up phases from the ranks' times (unix µs) and
// the launch's.
func (r *row) startup(kv map[string]string, np int, launch float64) {
	inf := math.Inf(1)
	firstMain, lastMain, lastInit, lastStep := inf, -inf, -inf, -inf
	for rank := range np {
		f := func(k string) float64 { return number(kv, fmt.Sprintf("rank.%d.%s", rank, k)) }
		m, is, ie, fs := f("main_unix_us"), f("init_start_unix_us"), f("init_end_unix_us"), f("first_step_unix_us")
		firstMain, lastMain = min(firstMain, m), max(lastMain, m)
		lastInit, lastStep = max(lastInit, ie), max(lastStep, fs)
		r.initMax = max(r.initMax, (ie-is)/1e3)
	}
	r.spawn, r.ranksUp = (firstMain-launch)/1e3, (lastMain-firstMain)/1e3
	r.init, r.firstStep = (lastInit-lastMain)/1e3, (lastStep-lastInit)/1e3
}

// resources fills the per-rank figures from the samples.
func (r *row) resources(o *observed) {
	var rss []float64
	for _, s := range o.ranks {
		rss = append(rss, float64(s.rssKiB)/1024)
		r.shmemMax = max(r.shmemMax, float64(s.shmemKiB)/1024)
		r.fdsMax, r.socketsMax, r.threadsMax = max(r.fdsMax, s.fds), max(r.socketsMax, s.sockets), max(r.threadsMax, s.threads)
	}
	r.ranks = len(o.ranks)
	if len(rss) > 0 {
		slices.Sort(rss)
		r.rssMed, r.rssMax = rss[len(rss)/2], rss[len(rss)-1]
	}
	for _, s := range o.launchers {
		r.launcherCPU += s.cpuSec
		r.launcherRSS += float64(s.hwmKiB) / 1024
	}
}

// printTables writes a transport's two tables: start-up and steps, and
// the per-rank resources in the hold.
func printTables(w io.Writer, transport string, rows []row) {
	fmt.Fprintf(w, "\n## %s: start-up (ms) and steps\n\n", transport)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "np\tspawn\tranks up\tinit\tinit max\tfirst step\tteardown\tstep ms\tprobe ms\tmiss ms\tallreduce ms\tstep/allreduce\tCPU ms/step/rank\tCPU vs first\t")
	var cpu0 float64
	for _, r := range rows {
		if r.err != "" {
			fmt.Fprintf(tw, "%d\tfailed\t\n", r.np)
			continue
		}
		if cpu0 == 0 {
			cpu0 = r.cpuStep
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.np, f0(r.spawn), f0(r.ranksUp), f0(r.init), f0(r.initMax),
			f0(r.firstStep), f0(r.teardown), f2(r.step), f2(r.probeCached), f2(r.probeMiss), f3(r.allreduce), ratio(r.step, r.allreduce),
			f3(r.cpuStep), ratio(r.cpuStep, cpu0))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n## %s: per rank in steady state (max over ranks unless said)\n\n", transport)
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "np\tranks seen\tRSS MiB med\tRSS MiB max\tfds\tsockets\tthreads\tgoroutines\tRssShmem MiB\tjob shm MiB\tlauncher CPU s\tlauncher maxRSS MiB\tjob CPU s\tleft behind\t")
	for _, r := range rows {
		if r.err != "" && r.ranks == 0 {
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.np, r.ranks, f1(r.rssMed), f1(r.rssMax), r.fdsMax, r.socketsMax,
			r.threadsMax, r.goMax, f1(r.shmemMax), f1(r.shmHeld), f2(r.launcherCPU), f1(r.launcherRSS), f2(r.jobCPU), len(r.leftovers))
	}
	tw.Flush()
	for _, r := range rows {
		if r.err != "" {
			fmt.Fprintf(w, "failed at np %d: %s\n", r.np, firstLine(r.err))
		}
		for _, l := range r.leftovers {
			fmt.Fprintf(w, "left behind at np %d: %s\n", r.np, l)
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func fnum(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func f0(v float64) string { return fnum(v, 0) }
func f1(v float64) string { return fnum(v, 1) }
func f2(v float64) string { return fnum(v, 2) }
func f3(v float64) string { return fnum(v, 3) }

// ratio is a/b with two decimals and an x, or "-".
func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "-"
	}
	return fnum(a/b, 2) + "x"
}

// yardstickMedian reads median_ms from the yardstick's line.
func yardstickMedian(out string) (float64, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		for _, f := range strings.Fields(tagged.ReplaceAllString(sc.Text(), "")) {
			if v, ok := strings.CutPrefix(f, "median_ms="); ok {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, fmt.Errorf("no median_ms in the yardstick's output: %q", tail(out, 500))
}
