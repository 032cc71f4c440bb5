package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/examples/internal/localrun"
	"github.com/gohorovod/gohorovod/internal/cputime"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
)

func TestParseShapes(t *testing.T) {
	cases := []struct {
		name, in string
		want     []layer // nil: an error is expected
	}{
		{"named", "# comment\nconv.0\t64x3x7x7\n\nbn.1\t64\n", []layer{{"conv.0", []int{64, 3, 7, 7}}, {"bn.1", []int{64}}}},
		{"unnamed", "2x3\n4\n", []layer{{"tensor.1", []int{2, 3}}, {"tensor.2", []int{4}}}},
		{"spaces around", "  a\t 2x 3 \n", []layer{{"a", []int{2, 3}}}},
		{"zero dim", "a\t2x0\n", nil},
		{"bad dim", "a\t2xz\n", nil},
		{"duplicate", "a\t2\na\t3\n", nil},
		{"leading tab", "\t2\n", []layer{{"tensor.1", []int{2}}}},
		{"no tensors", "# nothing\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseShapes(strings.NewReader(c.in), "test")
			if c.want == nil {
				if err == nil {
					t.Fatalf("want an error, got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i].name != c.want[i].name || !equalInts(got[i].shape, c.want[i].shape) {
					t.Fatalf("layer %d: got %v, want %v", i, got[i], c.want[i])
				}
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBuiltinModels checks the embedded shapes files against the counts
// their headers state.
func TestBuiltinModels(t *testing.T) {
	for _, c := range []struct {
		model             string
		tensors, elements int
	}{
		{"resnet50", 161, 25557032},
		{"vgg16", 32, 138357544},
		{"tiny40", 40, 10240},
	} {
		layers, err := loadShapes(c.model, "")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range layers {
			n += l.elements()
		}
		if len(layers) != c.tensors || n != c.elements {
			t.Errorf("%s: %d tensors of %d elements, want %d of %d", c.model, len(layers), n, c.tensors, c.elements)
		}
	}
	if _, err := loadShapes("alexnet", ""); err == nil {
		t.Error("unknown model accepted")
	}
	if _, err := loadShapes("resnet50", "testdata/missing.txt"); err == nil {
		t.Error("missing shapes file accepted")
	}
}

func TestParseOptions(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--compute-ms", "0", "--part-steps", "0", "--warmup", "0"}, true},
		{[]string{"--compute-ms", "-1"}, false},
		{[]string{"--iterations", "0"}, false},
		{[]string{"--batches-per-iter", "0"}, false},
		{[]string{"--warmup", "-1"}, false},
		{[]string{"extra"}, false},
		{[]string{"--no-such-flag"}, false},
		{[]string{"--powersgd-rank", "2", "--powersgd-start", "10"}, true},
		{[]string{"--powersgd-rank", "-1"}, false},
		{[]string{"--powersgd-start", "-1"}, false},
		{[]string{"--bytegrad"}, true},
		{[]string{"--bytegrad", "--powersgd-rank", "1"}, false},
		{[]string{"--rank-report", "--miss-steps", "2", "--hold-file", "x", "--hold-max", "1s"}, true},
		{[]string{"--miss-steps", "-1"}, false},
	} {
		if _, err := parse(c.args); (err == nil) != c.ok {
			t.Errorf("parse(%q): error %v, want ok=%v", c.args, err, c.ok)
		}
	}
}

// runRanks runs the benchmark on n ranks over the in-memory group and
// returns each rank's report and output.
func runRanks(t *testing.T, n int, args ...string) ([]report, []string) {
	t.Helper()
	cfg := config.Default()
	cfg.CycleTime = time.Millisecond
	return runRanksConfig(t, n, cfg, args...)
}

// runRanksConfig is runRanks under the runtime configuration cfg.
func runRanksConfig(t *testing.T, n int, cfg config.Config, args ...string) ([]report, []string) {
	t.Helper()
	o, err := parse(args)
	if err != nil {
		t.Fatal(err)
	}
	reps, outs, err := localrun.Run(n, cfg, 2*time.Minute, func(ctx context.Context, r *hvd.Runtime, out io.Writer) (report, error) {
		return run(ctx, o, r, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, n)
	for i := range outs {
		texts[i] = outs[i].String()
	}
	return reps, texts
}

// keyValues parses key=value lines, failing on any other line.
func keyValues(t *testing.T, out string) map[string]string {
	t.Helper()
	kv := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			t.Fatalf("not a key=value line: %q", sc.Text())
		}
		kv[k] = v
	}
	return kv
}

func num(t *testing.T, kv map[string]string, k string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(kv[k], 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, kv[k], err)
	}
	return v
}

// TestRun runs the benchmark briefly at np 2 on a tiny model and checks
// that the printed report is complete and consistent.
func TestRun(t *testing.T) {
	const target = 20.0
	reps, outs := runRanks(t, 2, "--shapes", "testdata/tiny_shapes.txt", "--compute-ms", "20",
		"--warmup", "1", "--batches-per-iter", "2", "--iterations", "2", "--part-steps", "3")
	if outs[1] != "" {
		t.Errorf("rank 1 printed %q", outs[1])
	}
	kv := keyValues(t, outs[0])
	for k, want := range map[string]float64{"ranks": 2, "tensors": 6, "elements": 312064, "steps": 4, "compute_ms_target": target} {
		if got := num(t, kv, k); got != want {
			t.Errorf("%s=%v, want %v", k, got, want)
		}
	}
	r0, r1, total := num(t, kv, "rank.0.steps_per_s"), num(t, kv, "rank.1.steps_per_s"), num(t, kv, "steps_per_s_total")
	if r0 <= 0 || r1 <= 0 || math.Abs(r0+r1-total) > 1e-3*total {
		t.Errorf("per-rank rates %g and %g do not add up to the total %g", r0, r1, total)
	}
	// The ranks step together, so their rates agree.
	if math.Abs(r0-r1) > 0.2*total {
		t.Errorf("rank rates %g and %g differ", r0, r1)
	}
	if got, want := num(t, kv, "samples_per_s_total"), 32*total; math.Abs(got-want) > 1e-3*want {
		t.Errorf("samples_per_s_total=%g, want %g", got, want)
	}
	// The timed steps' CPU time per sample (the two in-process ranks
	// each count the whole process's).
	if _, known := cputime.Seconds(); known && num(t, kv, "cpu_ms_per_sample") <= 0 {
		t.Errorf("cpu_ms_per_sample=%v", num(t, kv, "cpu_ms_per_sample"))
	}
	step, compute, comm, update := num(t, kv, "step_ms"), num(t, kv, "compute_ms"), num(t, kv, "comm_ms"), num(t, kv, "update_ms")
	if step <= 0 || comm <= 0 || update < 0 {
		t.Errorf("step %g, comm %g, update %g ms", step, comm, update)
	}
	// Calibration: the compute alone lands near its target (loosely: the
	// machine is shared and -race slows loops unevenly).
	if compute < target/4 || compute > target*4 {
		t.Errorf("compute_ms=%g, target %g", compute, target)
	}
	// A step does at least the compute.
	if step < compute/2 {
		t.Errorf("step_ms=%g below the compute alone %g", step, compute)
	}
	// The printed figures are rounded to 6 digits: compare to that.
	tol := 1e-4 * (compute + comm + update + step)
	if got, want := num(t, kv, "serial_ms"), compute+comm+update; math.Abs(got-want) > tol {
		t.Errorf("serial_ms=%g, want compute+comm+update = %g", got, want)
	}
	if got, want := num(t, kv, "hidden_ms"), compute+comm+update-step; math.Abs(got-want) > tol {
		t.Errorf("hidden_ms=%g, want %g", got, want)
	}
	if got, want := num(t, kv, "overlap"), (compute+comm+update-step)/min(compute, comm); math.Abs(got-want) > tol/min(compute, comm) {
		t.Errorf("overlap=%g, want %g", got, want)
	}
	// Every rank ends with the same report.
	if reps[0].stepMS != reps[1].stepMS || reps[0].totalSteps != reps[1].totalSteps || reps[0].passes != reps[1].passes {
		t.Errorf("reports differ: %+v and %+v", reps[0], reps[1])
	}
	if reps[0].passes <= 0 {
		t.Errorf("calibrated %g passes", reps[0].passes)
	}
	if got, want := num(t, kv, "allreduced_mib_per_step"), 312064*4.0/(1<<20); math.Abs(got-want) > 1e-5*want {
		t.Errorf("allreduced_mib_per_step=%g, want every gradient's %g", got, want)
	}
}

// TestRunPowerSGD: with -powersgd-rank 1 the bytes allreduced per step
// are PowerSGD's: (rows+cols)·4 for conv.0 (16x27), conv.2 (256x1152) and
// fc.weight.4 (64x256), the vectors as they are.
func TestRunPowerSGD(t *testing.T) {
	_, outs := runRanks(t, 2, "--shapes", "testdata/tiny_shapes.txt", "--compute-ms", "5", "--powersgd-rank", "1",
		"--warmup", "1", "--batches-per-iter", "2", "--iterations", "2", "--part-steps", "1")
	kv := keyValues(t, outs[0])
	want := float64((16+27)*4+(256+1152)*4+(64+256)*4+(16+256+64)*4) / (1 << 20)
	if got := num(t, kv, "allreduced_mib_per_step"); math.Abs(got-want) > 1e-5*want {
		t.Errorf("allreduced_mib_per_step=%g, want %g", got, want)
	}
	if got := num(t, kv, "powersgd_rank"); got != 1 {
		t.Errorf("powersgd_rank=%g", got)
	}
}

// TestRunByteGrad: with -bytegrad nothing is allreduced and rank 0 sends
// about a quarter of an fp32 allreduce's bytes per step (the runtime's
// count: the 8-bit chunks and their headers), and the report says so.
func TestRunByteGrad(t *testing.T) {
	_, outs := runRanks(t, 2, "--shapes", "testdata/tiny_shapes.txt", "--compute-ms", "5", "--bytegrad",
		"--warmup", "1", "--batches-per-iter", "2", "--iterations", "2", "--part-steps", "1")
	kv := keyValues(t, outs[0])
	fp32 := 312064 * 4.0 / (1 << 20) // 2(n−1)/n = 1 at np 2
	if got := num(t, kv, "allreduced_mib_per_step"); got != 0 {
		t.Errorf("allreduced_mib_per_step=%g, want 0", got)
	}
	if got := num(t, kv, "sent_mib_per_step"); got < 0.25*fp32 || got > 0.27*fp32 {
		t.Errorf("sent_mib_per_step=%g, want a quarter of fp32 allreduce's %g", got, fp32)
	}
	if kv["bytegrad"] != "true" {
		t.Errorf("bytegrad=%q", kv["bytegrad"])
	}
}

// TestRunAutotune: under HOROVOD_AUTOTUNE the warm-up goes on until the
// tuner has finished on every rank, so the timed steps run the tuned
// setting; the report says how many warm-up steps that took.
func TestRunAutotune(t *testing.T) {
	cfg := config.Default()
	cfg.Autotune = true
	cfg.AutotuneWarmupSamples, cfg.AutotuneStepsPerSample, cfg.AutotuneMaxSamples = 0, 1, 4
	reps, outs := runRanksConfig(t, 2, cfg, "--shapes", "testdata/tiny_shapes.txt", "--compute-ms", "1",
		"--warmup", "1", "--batches-per-iter", "2", "--iterations", "1", "--part-steps", "0")
	kv := keyValues(t, outs[0])
	if kv["autotuning_unfinished"] != "false" || num(t, kv, "autotune_warmup_steps") < 10 {
		t.Errorf("autotune_warmup_steps=%s autotuning_unfinished=%s: want the tuner finished during the warm-up",
			kv["autotune_warmup_steps"], kv["autotuning_unfinished"])
	}
	if reps[0].tuneSteps != reps[1].tuneSteps {
		t.Errorf("the ranks warmed up %d and %d steps", reps[0].tuneSteps, reps[1].tuneSteps)
	}
	// Without autotuning the report has no such lines.
	_, outs = runRanks(t, 2, "--shapes", "testdata/tiny_shapes.txt", "--compute-ms", "1",
		"--warmup", "1", "--batches-per-iter", "1", "--iterations", "1", "--part-steps", "0")
	if _, ok := keyValues(t, outs[0])["autotune_warmup_steps"]; ok {
		t.Errorf("autotune lines without autotuning:\n%s", outs[0])
	}
}

// TestOverlap shows, on the real runtime, that gradients are reduced while
// backward still computes: the allreduce of the first gradient (the last
// layer, small) has completed before the compute of the last layer in
// backward order has ended. On a quiet machine that holds in every step;
// under the load of the whole test suite on two cores, a rank's backward
// can run a whole pass behind the other's, and far fewer steps qualify, so
// the test asks for some steps. With the reductions deferred to the
// optimizer's step, first_reduced_early would be 0 in every run.
func TestOverlap(t *testing.T) {
	reps, _ := runRanks(t, 2, "--shapes", "testdata/tiny_shapes.txt", "--compute-ms", "60",
		"--warmup", "1", "--batches-per-iter", "3", "--iterations", "2", "--part-steps", "0")
	for rank, rep := range reps {
		if rep.firstReducedEarly <= 0 {
			t.Errorf("rank %d: the first gradient was reduced before backward's end in %.0f%% of steps", rank, 100*rep.firstReducedEarly)
		}
		if rep.reducedInBackward <= 0 {
			t.Errorf("rank %d: no gradient was reduced during backward", rank)
		}
	}
}

// TestRankReport: -rank-report prints every rank's pid, start-up times in
// order, goroutines and CPU, -miss-steps the probe's step times, and
// -hold-file holds the ranks after rank 0's hold=begin until the file
// exists.
func TestRankReport(t *testing.T) {
	stop := t.TempDir() + "/stop"
	go func() {
		time.Sleep(200 * time.Millisecond)
		os.WriteFile(stop, nil, 0o600)
	}()
	_, outs := runRanks(t, 2, "--shapes", "testdata/tiny_shapes.txt", "--compute-ms", "0", "--warmup", "1",
		"--batches-per-iter", "2", "--iterations", "1", "--part-steps", "0", "--rank-report", "--miss-steps", "2",
		"--hold-file", stop, "--hold-max", "30s")
	kv := keyValues(t, outs[0])
	if kv["hold"] != "begin" {
		t.Errorf("no hold=begin line:\n%s", outs[0])
	}
	for rank := range 2 {
		p := func(f string) float64 { return num(t, kv, fmt.Sprintf("rank.%d.%s", rank, f)) }
		// In process the runtime is initialised by the test: no Init times.
		if p("pid") != float64(os.Getpid()) || p("first_step_unix_us") <= 0 || p("goroutines") < 1 {
			t.Errorf("rank %d: pid %v, first step %v, goroutines %v", rank, p("pid"), p("first_step_unix_us"), p("goroutines"))
		}
	}
	if num(t, kv, "probe_cached_step_ms") <= 0 || num(t, kv, "probe_miss_step_ms") <= 0 {
		t.Errorf("probe_cached_step_ms=%s probe_miss_step_ms=%s", kv["probe_cached_step_ms"], kv["probe_miss_step_ms"])
	}
	if _, ok := kv["cpu_ms_per_step_per_rank"]; !ok {
		t.Error("no cpu_ms_per_step_per_rank")
	}
}
