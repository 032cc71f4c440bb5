package scaling

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestGrid(t *testing.T) {
	ss := Grid([]float64{1, 4}, []float64{1, 5}, 4, 1)
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	want := "defaults (4 MiB, 1 ms)|1 MiB, 1 ms|1 MiB, 5 ms|4 MiB, 5 ms|autotuned"
	if got := strings.Join(names, "|"); got != want {
		t.Fatalf("settings %s, want %s", got, want)
	}
	if !ss[0].Default || len(ss[0].Env) != 0 || !ss[4].Tuned || ss[4].Env[0] != "HOROVOD_AUTOTUNE=1" {
		t.Errorf("defaults %+v, tuned %+v", ss[0], ss[4])
	}
	if got := strings.Join(ss[2].Env, " "); got != "HOROVOD_FUSION_THRESHOLD=1048576 HOROVOD_CYCLE_TIME=5" {
		t.Errorf("env %q", got)
	}
	if got := Grid([]float64{0.5}, []float64{0.25}, 4, 1)[1].Env[0]; got != "HOROVOD_FUSION_THRESHOLD=524288" {
		t.Errorf("half a MiB: %q", got)
	}
}

func TestRateSweep(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      float64
		err       error
	}{
		{"mnist last epoch", "epoch 1: loss 1  7000 samples/s  lr 0.1  (autotuning)\nepoch 2: loss 0.5  9000 samples/s  lr 0\n", 9000, nil},
		{"mnist still tuning", "epoch 1: x  7000 samples/s\nepoch 2: x  8000 samples/s  lr 0  (autotuning)\n", 0, ErrStillTuning},
		{"synthetic", "model=resnet50\nsamples_per_s_total=1234.5\n", 1234.5, nil},
		{"synthetic still tuning", "autotune_warmup_steps=5000\nautotuning_unfinished=true\nsamples_per_s_total=10\n", 0, ErrStillTuning},
		{"nothing", "hello\n", 0, ErrNoThroughput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Rate(strings.NewReader(tc.out))
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("Rate = %v, %v; want %v, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestOrderRotates(t *testing.T) {
	if got := Order(4, 1); got[0] != 1 || got[3] != 0 {
		t.Errorf("round 1: %v", got)
	}
	first := map[int]bool{}
	for r := range 4 {
		first[Order(4, r)[0]] = true
	}
	if len(first) != 4 {
		t.Errorf("the first setting of 4 rounds: %v", first)
	}
}

func TestSummarizeAndTable(t *testing.T) {
	ss := Grid([]float64{1, 16}, []float64{1}, 4, 1) // defaults, 1 MiB, 16 MiB, autotuned
	rates := [][]float64{{100, 90, 110}, {80, 85, 70}, {120, 125, 119}, {118, 121, 117}}
	res, err := Summarize(ss, rates)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best != 2 || res.Tuned != 3 || res.Default != 0 || res.Medians[0] != 100 {
		t.Fatalf("%+v", res)
	}
	if res.VsBest != 118.0/120 || res.VsDefault != 1.18 {
		t.Errorf("ratios %v %v", res.VsBest, res.VsDefault)
	}
	var b bytes.Buffer
	if err := SweepTable(&b, res, rates); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"16 MiB, 1 ms", "100.0%*", "autotuned / best fixed (16 MiB, 1 ms): 98.3%", "autotuned / defaults: 118.0%", "120 125 119"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The tuned run never counts as the best fixed setting.
	res, _ = Summarize(ss, [][]float64{{1}, {1}, {1}, {500}})
	if res.Best == 3 {
		t.Error("the autotuned run counted as fixed")
	}
	if _, err := Summarize(ss[:3], rates); err == nil {
		t.Error("mismatched lengths accepted")
	}
	if _, err := Summarize([]Setting{{Name: "t", Tuned: true}}, [][]float64{{1}}); err == nil {
		t.Error("no fixed setting accepted")
	}
}

func TestMedian(t *testing.T) {
	if Median(nil) != 0 || Median([]float64{3, 1, 2}) != 2 || Median([]float64{4, 1, 2, 3}) != 2.5 {
		t.Error("median")
	}
}
