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
	small := filepath.Join(tmp, "4k_x1000.txt")
	var sb strings.Builder
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&sb, "t%d\t1024\n", i)
	}
	tiny := filepath.Join(tmp, "tiny_x161.txt")
	var tb strings.Builder
	for i := 0; i < 161; i++ {
		fmt.Fprintf(&tb, "t%d\t1\n", i)
	}
	if err := os.WriteFile(small, []byte(sb.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(tiny, []byte(tb.String()), 0o644); err != nil {
		return err
	}
	np := strconv.Itoa(a.np)
	iters := strconv.Itoa(a.iters)
	fb := strconv.FormatInt(a.fusion, 10)
	shapes := filepath.Join(a.benchDir, "resnet50_shapes.txt")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	yardsticks := []struct {
		name string
		args []string
	}{
		{"resnet50", []string{"--shapes", shapes, "--fusion-bytes", fb}},
		{"64MiB", []string{"--bytes", "67108864", "--modes", "whole"}},
		{"4KiBx1000", []string{"--shapes", small, "--fusion-bytes", fb}},
		{"tinyx161", []string{"--shapes", tiny, "--modes", "per-tensor,whole"}},
	}
	// Each round runs the yardstick, then the runtime, so that both see
	// about the same load; with several rounds the summary lines give the
	// medians over rounds.
	sum := map[string]*summary{}
	var order []string
	// The optimizer case's, beside the allreduce's (best holds the
	// allreduce's times, ratio optimizer/allreduce).
	optSum := map[string]*summary{}
	var optOrder []string
	for round := 1; round <= max(a.rounds, 1); round++ {
		raw := map[string][]record{}
		for _, c := range yardsticks {
			if !needed(c.name, a.cases) {
				continue
			}
			fmt.Fprintf(os.Stderr, "# round %d yardstick %s\n", round, c.name)
			b, err := run(os.Stdout, "scripts/mpirun.sh", append([]string{np, base, "--iters", iters}, c.args...)...)
			if err != nil {
				return fmt.Errorf("yardstick %s: %w", c.name, err)
			}
			for _, rec := range parseLines(bytes.NewReader(b)) {
				rec["case"] = c.name
				fmt.Printf("impl=raw-mpi case=%s mode=%s median_ms=%s algbw_GBps=%s busbw_GBps=%s\n",
					c.name, rec["mode"], rec["median_ms"], rec["algbw_GBps"], rec["busbw_GBps"])
				raw[c.name] = append(raw[c.name], rec)
			}
		}
		rawRT := map[string]float64{} // by tensor set: the packed call under the runtime's MPI settings
		for _, c := range yardsticks {
			if !flatOf(c.name, a.cases) {
				continue
			}
			fmt.Fprintf(os.Stderr, "# round %d yardstick %s under the runtime's MPI settings\n", round, c.name)
			args := append(append([]string{np, base, "--iters", iters}, c.args...), "--modes", "whole")
			b, err := runEnv(os.Stdout, runtimeMPISettings(), "scripts/mpirun.sh", args...)
			if err != nil {
				return fmt.Errorf("yardstick %s under the runtime's MPI settings: %w", c.name, err)
			}
			for _, rec := range parseLines(bytes.NewReader(b)) {
				rawRT[c.name] = rec.num("median_ms")
				fmt.Printf("impl=raw-mpi-runtime-settings case=%s mode=%s median_ms=%s algbw_GBps=%s busbw_GBps=%s\n",
					c.name, rec["mode"], rec["median_ms"], rec["algbw_GBps"], rec["busbw_GBps"])
			}
		}
		fmt.Fprintf(os.Stderr, "# round %d runtime\n", round)
		b, err := run(os.Stdout, "scripts/mpirun.sh", append([]string{np, self, "-worker", "-iters", iters}, a.worker...)...)
		if err != nil {
			return fmt.Errorf("runtime worker: %w", err)
		}
		recs := parseLines(bytes.NewReader(b))
		// The yardstick has no optimizer case: its figures go beside the
		// runtime's allreduce of the same gradients (resnet50) under the
		// same knobs.
		for _, rec := range recs {
			if rec["case"] != optimizerCase {
				continue
			}
			knobs := []string{rec["fusion"], rec["chunk"], rec["fchunk"], rec["maxfused"]}
			var ar record
			for _, r := range recs {
				if r["case"] == "resnet50" && slices.Equal(knobs, []string{r["fusion"], r["chunk"], r["fchunk"], r["maxfused"]}) {
					ar = r
				}
			}
			line := fmt.Sprintf("optimizer case=%s fusion=%s chunk=%s fchunk=%s maxfused=%s runtime_ms=%s",
				rec["case"], rec["fusion"], rec["chunk"], rec["fchunk"], rec["maxfused"], rec["median_ms"])
			if ar != nil && ar.num("median_ms") > 0 {
				over := rec.num("median_ms") / ar.num("median_ms")
				line += fmt.Sprintf(" allreduce_ms=%s optimizer_over_allreduce=%.3f", ar["median_ms"], over)
				key := strings.Join(append([]string{rec["case"]}, knobs...), " ")
				s := optSum[key]
				if s == nil {
					s = &summary{rec: rec}
					optSum[key] = s
					optOrder = append(optOrder, key)
				}
				s.runtime = append(s.runtime, rec.num("median_ms"))
				s.best = append(s.best, ar.num("median_ms"))
				s.ratio = append(s.ratio, over)
			}
			fmt.Println(line)
		}
		direct := map[string]float64{} // by case: the last direct-mpi time before the runtime's
		for _, rec := range recs {
			c := rec["case"]
			if rec["impl"] == "direct-mpi" {
				direct[c] = rec.num("median_ms")
				continue
			}
			best, bestMode, perTensor := 0.0, "", 0.0
			for _, r := range raw[strings.TrimSuffix(c, flatSuffix)] {
				if m := r.num("median_ms"); best == 0 || m < best {
					best, bestMode = m, r["mode"]
				}
				if r["mode"] == "per-tensor" {
					perTensor = r.num("median_ms")
				}
			}
			if best == 0 {
				continue
			}
			line := fmt.Sprintf("ratio case=%s fusion=%s chunk=%s fchunk=%s maxfused=%s runtime_ms=%s raw_best_ms=%.4f raw_best_mode=%s ratio=%.3f",
				c, rec["fusion"], rec["chunk"], rec["fchunk"], rec["maxfused"], rec["median_ms"], best, bestMode, rec.num("median_ms")/best)
			if perTensor > 0 {
				line += fmt.Sprintf(" speedup_vs_per_tensor=%.2f", perTensor/rec.num("median_ms"))
			}
			flat := strings.HasSuffix(c, flatSuffix)
			rt := rawRT[strings.TrimSuffix(c, flatSuffix)]
			if flat && rt > 0 {
				line += fmt.Sprintf(" raw_runtime_settings_ms=%.4f ratio_vs_runtime_settings=%.3f", rt, rec.num("median_ms")/rt)
			}
			if d := direct[c]; flat && d > 0 {
				line += fmt.Sprintf(" direct_ms=%.4f ratio_vs_direct=%.3f", d, rec.num("median_ms")/d)
			}
			fmt.Println(line)
			key := strings.Join([]string{c, rec["fusion"], rec["chunk"], rec["fchunk"], rec["maxfused"]}, " ")
			s := sum[key]
			if s == nil {
				s = &summary{rec: rec}
				sum[key] = s
				order = append(order, key)
			}
			s.runtime = append(s.runtime, rec.num("median_ms"))
			s.best = append(s.best, best)
			s.ratio = append(s.ratio, rec.num("median_ms")/best)
			if perTensor > 0 {
				s.perTensor = append(s.perTensor, perTensor)
				s.speedup = append(s.speedup, perTensor/rec.num("median_ms"))
			}
			if flat && rt > 0 {
				s.rawRT = append(s.rawRT, rt)
				s.overRawRT = append(s.overRawRT, rec.num("median_ms")/rt)
			}
			if d := direct[c]; flat && d > 0 {
				s.direct = append(s.direct, d)
				s.overDirect = append(s.overDirect, rec.num("median_ms")/d)
			}
		}
	}
	if a.rounds > 1 {
		for _, key := range order {
			s := sum[key]
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
		for _, key := range optOrder {
			s := optSum[key]
			fmt.Printf("summary case=%s fusion=%s chunk=%s fchunk=%s maxfused=%s rounds=%d runtime_ms=%.4f allreduce_ms=%.4f optimizer_over_allreduce=%.3f\n",
				s.rec["case"], s.rec["fusion"], s.rec["chunk"], s.rec["fchunk"], s.rec["maxfused"], len(s.ratio),
				median(s.runtime), median(s.best), median(s.ratio))
		}
	}
	return nil
}
