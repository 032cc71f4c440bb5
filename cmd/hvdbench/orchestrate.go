package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/mpi"
)

// flatSuffix marks a case whose tensors are views of one flat buffer; its
// yardstick is the case without the suffix.
const flatSuffix = "flat"

// record is one key=value line.
type record map[string]string

func parseLines(r io.Reader) []record {
	var out []record
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rec := record{}
		for _, f := range strings.Fields(sc.Text()) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				rec = nil
				break
			}
			rec[k] = v
		}
		if len(rec) > 0 && (rec["mode"] != "" || rec["impl"] != "") {
			out = append(out, rec)
		}
	}
	return out
}

func (r record) num(k string) float64 {
	v, _ := strconv.ParseFloat(r[k], 64)
	return v
}

type orchArgs struct {
	np       int
	benchDir string
	iters    int
	worker   []string // extra worker flags
	fusion   int64    // the yardstick's fused mode buffer
	rounds   int      // yardstick-then-runtime rounds
	// cases are the worker's: only their yardsticks run (needed).
	cases []string
}

// needed reports whether one of cases is measured against the yardstick
// of the tensor set named set: the set itself, its flat views, or, for
// ResNet-50's, the optimizer case.
func needed(set string, cases []string) bool {
	return slices.ContainsFunc(cases, func(c string) bool {
		return strings.TrimSuffix(c, flatSuffix) == set || (set == "resnet50" && c == optimizerCase)
	})
}

// flatOf reports whether one of cases is the flat views of the tensor set
// named set.
func flatOf(set string, cases []string) bool {
	return slices.Contains(cases, set+flatSuffix)
}

// summary gathers one runtime setting's figures over rounds.
type summary struct {
	rec                                      record
	runtime, best, ratio, perTensor, speedup []float64
	// A flat case's: the packed call under the runtime's MPI settings
	// and the runtime's time over it; the same call made directly in the
	// worker's process (impl=direct-mpi) and the runtime's time over it.
	rawRT, overRawRT, direct, overDirect []float64
}

// runtimeMPISettings is the environment under which the yardstick's packed
// call (mode whole) runs once more for a flat case's tensor set: with the thread level the runtime's
// mpi.Init asks for (MPI_THREAD_MULTIPLE, 3 in Open MPI, whose MPI_Init
// asks for OMPI_MPI_THREAD_LEVEL's level) and, unless the environment
// chose otherwise, Open MPI yielding while it waits, as mpi.Init sets it.
// The runtime's time over that call is its own cost, not its MPI
// settings'.
func runtimeMPISettings() []string {
	env := []string{"OMPI_MPI_THREAD_LEVEL=3"}
	if _, set := os.LookupEnv(mpi.YieldEnv); !set {
		env = append(env, mpi.YieldEnv+"=1")
	}
	return env
}

// median returns the median of xs (the upper one of an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func run(out io.Writer, name string, args ...string) ([]byte, error) {
	return runEnv(out, nil, name, args...)
}

// runEnv is run with env added to this process's environment.
func runEnv(out io.Writer, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var buf bytes.Buffer
	cmd.Stdout = io.MultiWriter(&buf, out)
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	return buf.Bytes(), err
}

// yardstickSource is the raw-MPI yardstick's C source, relative to the
// repository's root, where hvdbench runs.
const yardstickSource = "cmd/hvdbench/yardstick/baseline.c"

// yardstick is one tensor set the raw-MPI yardstick measures, with its
// arguments.
type yardstick struct {
	name string
	args []string
}

// orchestration is one hvdbench run's state: the built yardstick, the
// tensor sets it measures, and the summaries over rounds.
type orchestration struct {
	a          orchArgs
	base       string // the yardstick's binary
	self       string // this binary, the runtime's worker
	np, iters  string
	yardsticks []yardstick
	// The summaries by key, in the order first seen: the allreduce cases'
	// against the yardstick, and the optimizer case's beside the
	// allreduce's (best holds the allreduce's times, ratio
	// optimizer/allreduce).
	sum, optSum     summaries
	order, optOrder []string
}

// summaries holds a summary by key.
type summaries map[string]*summary

// get returns key's summary, adding it (of rec, its key appended to order)
// if new.
func (m summaries) get(key string, rec record, order *[]string) *summary {
	s := m[key]
	if s == nil {
		s = &summary{rec: rec}
		m[key] = s
		*order = append(*order, key)
	}
	return s
}

// orchestrate builds and runs the yardstick and the worker, then prints the
// ratios.
func orchestrate(a orchArgs) error {
	if err := os.MkdirAll("bin", 0o755); err != nil {
		return err
	}
	base := filepath.Join("bin", "allreduce_baseline")
	if _, err := run(os.Stderr, "mpicc", "-O2", "-o", base, yardstickSource); err != nil {
		return fmt.Errorf("building the yardstick: %w", err)
	}
	tmp, err := os.MkdirTemp("", "hvdbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	yardsticks, err := writeYardsticks(tmp, a)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	o := &orchestration{a: a, base: base, self: self, np: strconv.Itoa(a.np), iters: strconv.Itoa(a.iters),
		yardsticks: yardsticks, sum: summaries{}, optSum: summaries{}}
	// Each round runs the yardstick, then the runtime, so that both see
	// about the same load; with several rounds the summary lines give the
	// medians over rounds.
	for round := 1; round <= max(a.rounds, 1); round++ {
		if err := o.round(round); err != nil {
			return err
		}
	}
	if a.rounds > 1 {
		o.printSummaries()
	}
	return nil
}

// writeYardsticks writes the shapes files of the small and tiny tensor
// sets into dir and returns the tensor sets the yardstick measures.
func writeYardsticks(dir string, a orchArgs) ([]yardstick, error) {
	small := filepath.Join(dir, "4k_x1000.txt")
	var sb strings.Builder
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&sb, "t%d\t1024\n", i)
	}
	tiny := filepath.Join(dir, "tiny_x161.txt")
	var tb strings.Builder
	for i := 0; i < 161; i++ {
		fmt.Fprintf(&tb, "t%d\t1\n", i)
	}
	if err := os.WriteFile(small, []byte(sb.String()), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(tiny, []byte(tb.String()), 0o644); err != nil {
		return nil, err
	}
	fb := strconv.FormatInt(a.fusion, 10)
	shapes := filepath.Join(a.benchDir, "resnet50_shapes.txt")
	return []yardstick{
		{"resnet50", []string{"--shapes", shapes, "--fusion-bytes", fb}},
		{"64MiB", []string{"--bytes", "67108864", "--modes", "whole"}},
		{"4KiBx1000", []string{"--shapes", small, "--fusion-bytes", fb}},
		{"tinyx161", []string{"--shapes", tiny, "--modes", "per-tensor,whole"}},
	}, nil
}

// round runs the yardstick (plainly, then for the flat cases under the
// runtime's MPI settings), then the runtime's worker, and prints the
// round's lines.
func (o *orchestration) round(round int) error {
	raw, err := o.rawMPI(round)
	if err != nil {
		return err
	}
	rawRT, err := o.rawUnderRuntimeSettings(round)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "# round %d runtime\n", round)
	b, err := run(os.Stdout, "scripts/mpirun.sh", append([]string{o.np, o.self, "-worker", "-iters", o.iters}, o.a.worker...)...)
	if err != nil {
		return fmt.Errorf("runtime worker: %w", err)
	}
	recs := parseLines(bytes.NewReader(b))
	o.optimizerLines(recs)
	o.ratioLines(recs, raw, rawRT)
	return nil
}

// rawMPI runs the yardstick on the tensor sets that the cases need and
// returns its records by tensor set.
func (o *orchestration) rawMPI(round int) (map[string][]record, error) {
	raw := map[string][]record{}
	for _, c := range o.yardsticks {
		if !needed(c.name, o.a.cases) {
			continue
		}
		fmt.Fprintf(os.Stderr, "# round %d yardstick %s\n", round, c.name)
		b, err := run(os.Stdout, "scripts/mpirun.sh", append([]string{o.np, o.base, "--iters", o.iters}, c.args...)...)
		if err != nil {
			return nil, fmt.Errorf("yardstick %s: %w", c.name, err)
		}
		for _, rec := range parseLines(bytes.NewReader(b)) {
			rec["case"] = c.name
			fmt.Printf("impl=raw-mpi case=%s mode=%s median_ms=%s algbw_GBps=%s busbw_GBps=%s\n",
				c.name, rec["mode"], rec["median_ms"], rec["algbw_GBps"], rec["busbw_GBps"])
			raw[c.name] = append(raw[c.name], rec)
		}
	}
	return raw, nil
}

// rawUnderRuntimeSettings runs the yardstick's packed call under the
// runtime's MPI settings for the tensor sets with a flat case, and returns
// its times by tensor set.
func (o *orchestration) rawUnderRuntimeSettings(round int) (map[string]float64, error) {
	rawRT := map[string]float64{}
	for _, c := range o.yardsticks {
		if !flatOf(c.name, o.a.cases) {
			continue
		}
		fmt.Fprintf(os.Stderr, "# round %d yardstick %s under the runtime's MPI settings\n", round, c.name)
		args := append(append([]string{o.np, o.base, "--iters", o.iters}, c.args...), "--modes", "whole")
		b, err := runEnv(os.Stdout, runtimeMPISettings(), "scripts/mpirun.sh", args...)
		if err != nil {
			return nil, fmt.Errorf("yardstick %s under the runtime's MPI settings: %w", c.name, err)
		}
		for _, rec := range parseLines(bytes.NewReader(b)) {
			rawRT[c.name] = rec.num("median_ms")
			fmt.Printf("impl=raw-mpi-runtime-settings case=%s mode=%s median_ms=%s algbw_GBps=%s busbw_GBps=%s\n",
				c.name, rec["mode"], rec["median_ms"], rec["algbw_GBps"], rec["busbw_GBps"])
		}
	}
	return rawRT, nil
}

// knobs are the runtime settings a record was measured under.
func (r record) knobs() []string {
	return []string{r["fusion"], r["chunk"], r["fchunk"], r["maxfused"]}
}

// optimizerLines prints the optimizer case's lines. The yardstick has no
// optimizer case: its figures go beside the runtime's allreduce of the
// same gradients (resnet50) under the same knobs.
func (o *orchestration) optimizerLines(recs []record) {
	for _, rec := range recs {
		if rec["case"] != optimizerCase {
			continue
		}
		knobs := rec.knobs()
		var ar record
		for _, r := range recs {
			if r["case"] == "resnet50" && slices.Equal(knobs, r.knobs()) {
				ar = r
			}
		}
		line := fmt.Sprintf("optimizer case=%s fusion=%s chunk=%s fchunk=%s maxfused=%s runtime_ms=%s",
			rec["case"], rec["fusion"], rec["chunk"], rec["fchunk"], rec["maxfused"], rec["median_ms"])
		if ar != nil && ar.num("median_ms") > 0 {
			over := rec.num("median_ms") / ar.num("median_ms")
			line += fmt.Sprintf(" allreduce_ms=%s optimizer_over_allreduce=%.3f", ar["median_ms"], over)
			s := o.optSum.get(strings.Join(append([]string{rec["case"]}, knobs...), " "), rec, &o.optOrder)
			s.runtime = append(s.runtime, rec.num("median_ms"))
			s.best = append(s.best, ar.num("median_ms"))
			s.ratio = append(s.ratio, over)
		}
		fmt.Println(line)
	}
}

// bestRaw returns the yardstick's fastest time among recs, its mode, and
// its per-tensor time (0 if none).
func bestRaw(recs []record) (best float64, mode string, perTensor float64) {
	for _, r := range recs {
		if m := r.num("median_ms"); best == 0 || m < best {
			best, mode = m, r["mode"]
		}
		if r["mode"] == "per-tensor" {
			perTensor = r.num("median_ms")
		}
	}
	return best, mode, perTensor
}

// ratioLines prints each runtime case's ratio line against the
// yardstick's records raw (and, for a flat case, against the packed call
// under the runtime's settings rawRT and made directly in the worker),
// and adds it to the summaries.
func (o *orchestration) ratioLines(recs []record, raw map[string][]record, rawRT map[string]float64) {
	direct := map[string]float64{} // by case: the last direct-mpi time before the runtime's
	for _, rec := range recs {
		c := rec["case"]
		if rec["impl"] == "direct-mpi" {
			direct[c] = rec.num("median_ms")
			continue
		}
		best, bestMode, perTensor := bestRaw(raw[strings.TrimSuffix(c, flatSuffix)])
		if best == 0 {
			continue
		}
		ms := rec.num("median_ms")
		line := fmt.Sprintf("ratio case=%s fusion=%s chunk=%s fchunk=%s maxfused=%s runtime_ms=%s raw_best_ms=%.4f raw_best_mode=%s ratio=%.3f",
			c, rec["fusion"], rec["chunk"], rec["fchunk"], rec["maxfused"], rec["median_ms"], best, bestMode, ms/best)
		if perTensor > 0 {
			line += fmt.Sprintf(" speedup_vs_per_tensor=%.2f", perTensor/ms)
		}
		flat := strings.HasSuffix(c, flatSuffix)
		rt := rawRT[strings.TrimSuffix(c, flatSuffix)]
		if flat && rt > 0 {
			line += fmt.Sprintf(" raw_runtime_settings_ms=%.4f ratio_vs_runtime_settings=%.3f", rt, ms/rt)
		}
		d := direct[c]
		if flat && d > 0 {
			line += fmt.Sprintf(" direct_ms=%.4f ratio_vs_direct=%.3f", d, ms/d)
		}
		fmt.Println(line)
		s := o.sum.get(strings.Join(append([]string{c}, rec.knobs()...), " "), rec, &o.order)
		s.runtime = append(s.runtime, ms)
		s.best = append(s.best, best)
		s.ratio = append(s.ratio, ms/best)
		if perTensor > 0 {
			s.perTensor = append(s.perTensor, perTensor)
			s.speedup = append(s.speedup, perTensor/ms)
		}
		if flat && rt > 0 {
			s.rawRT = append(s.rawRT, rt)
			s.overRawRT = append(s.overRawRT, ms/rt)
		}
		if flat && d > 0 {
			s.direct = append(s.direct, d)
			s.overDirect = append(s.overDirect, ms/d)
		}
	}
}

// printSummaries prints the medians over rounds of every case's figures.
func (o *orchestration) printSummaries() {
	for _, key := range o.order {
		s := o.sum[key]
		line := fmt.Sprintf("summary case=%s fusion=%s chunk=%s fchunk=%s maxfused=%s rounds=%d runtime_ms=%.4f raw_best_ms=%.4f ratio=%.3f",
			s.rec["case"], s.rec["fusion"], s.rec["chunk"], s.rec["fchunk"], s.rec["maxfused"], len(s.ratio),
			median(s.runtime), median(s.best), median(s.ratio))
		if len(s.speedup) > 0 {
			line += fmt.Sprintf(" raw_per_tensor_ms=%.4f speedup_vs_per_tensor=%.2f", median(s.perTensor), median(s.speedup))
		}
		if len(s.rawRT) > 0 {
			line += fmt.Sprintf(" raw_runtime_settings_ms=%.4f ratio_vs_runtime_settings=%.3f", median(s.rawRT), median(s.overRawRT))
		}
		if len(s.direct) > 0 {
			line += fmt.Sprintf(" direct_ms=%.4f ratio_vs_direct=%.3f", median(s.direct), median(s.overDirect))
		}
		fmt.Println(line)
	}
	for _, key := range o.optOrder {
		s := o.optSum[key]
		fmt.Printf("summary case=%s fusion=%s chunk=%s fchunk=%s maxfused=%s rounds=%d runtime_ms=%.4f allreduce_ms=%.4f optimizer_over_allreduce=%.3f\n",
			s.rec["case"], s.rec["fusion"], s.rec["chunk"], s.rec["fchunk"], s.rec["maxfused"], len(s.ratio),
			median(s.runtime), median(s.best), median(s.ratio))
	}
}
