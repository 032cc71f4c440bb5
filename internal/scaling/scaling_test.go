package scaling

import (
	"bytes"
	"errors"
	"image/png"
	"math"
	"strings"
	"testing"
)

func TestRate(t *testing.T) {
	out := `[1,0]<stdout>:mnist: 2 ranks
[1,0]<stdout>:epoch 1: loss 0.2617  test accuracy 95.01%  1.6s (34% in Step)  36986 samples/s  lr 0.1
[1,0]<stdout>:epoch 2: loss 0.1018  test accuracy 97.47%  1.3s (20% in Step)  46896.5 samples/s  lr 0.05
`
	got, err := Rate(strings.NewReader(out))
	if err != nil || got != 46896.5 {
		t.Fatalf("got %v %v, want the last epoch's 46896.5", got, err)
	}
	if _, err := Rate(strings.NewReader("no epochs here\n")); !errors.Is(err, ErrNoThroughput) {
		t.Fatalf("no epoch line: %v", err)
	}
}

func TestTableAndEfficiency(t *testing.T) {
	pts := []Point{{NP: 1, Measured: 100, Bound: 100}, {NP: 2, Measured: 150, Bound: 180}}
	if e := pts[1].Efficiency(); e != 150.0/180 {
		t.Fatalf("efficiency %v", e)
	}
	if (Point{NP: 2, Measured: 1}).Efficiency() != 0 {
		t.Fatal("no bound must give 0")
	}
	var b bytes.Buffer
	if err := Table(&b, pts, 100); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "   2          150          180          200      83.3%      75.0%\n") || strings.Contains(b.String(), "paired") {
		t.Fatalf("table:\n%s", b.String())
	}
	// With rounds, the median of the per-round ratios is shown too.
	pts[1].Paired = 0.9
	b.Reset()
	if err := Table(&b, pts, 100); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "vs bound (paired)") || !strings.Contains(b.String(), "75.0%              90.0%\n") {
		t.Fatalf("table with paired efficiency:\n%s", b.String())
	}
	// Without np 1 (scalebench -min-np 2) the ideal is unknown: "-".
	b.Reset()
	if err := Table(&b, pts[1:], 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "   2          150          180            -      83.3%          -") {
		t.Fatalf("table without one rank's throughput:\n%s", b.String())
	}
}

func TestCPUPerSample(t *testing.T) {
	out := `[1,0]<stdout>:mnist: 2 ranks
[1,0]<stdout>:epoch 1: loss 0.26  test accuracy 95.01%  1.6s (34% in Step)  36986 samples/s  0.1234 CPU-ms/sample (all ranks)  90 KiB allreduced/step  lr 0.1
[1,0]<stdout>:epoch 2: loss 0.10  test accuracy 97.47%  1.3s (20% in Step)  46896.5 samples/s  0.0567 CPU-ms/sample (all ranks)  90 KiB allreduced/step  lr 0
`
	got, err := CPUPerSample(strings.NewReader(out))
	if err != nil || got != 0.0567 {
		t.Fatalf("got %v %v, want the last epoch's 0.0567", got, err)
	}
	for _, bad := range []string{
		"epoch 1: loss 1  7000 samples/s  lr 0\n",
		// The last epoch has no figure: an earlier one's is not this run's.
		"epoch 1: 7000 samples/s  1 CPU-ms/sample\nepoch 2: 8000 samples/s  lr 0\n",
		"samples_per_s_total=10\n",
	} {
		if _, err := CPUPerSample(strings.NewReader(bad)); !errors.Is(err, ErrNoCPU) {
			t.Errorf("%q: %v, want ErrNoCPU", bad, err)
		}
	}
}

func TestPairedRatio(t *testing.T) {
	// Round 2's single-rank figure is missing: it is left out.
	if got := PairedRatio([]float64{2.2, 3, 1.05}, []float64{2, 0, 1}); math.Abs(got-1.075) > 1e-12 {
		t.Fatalf("PairedRatio = %v, want the median of 1.1 and 1.05", got)
	}
	if got := PairedRatio([]float64{1}, nil); got != 0 {
		t.Fatalf("no base: %v", got)
	}
}

func TestTableAndRatioLinesWithCPU(t *testing.T) {
	pts := []Point{
		{NP: 1, Measured: 100, Bound: 100, CPU: 0.05, BoundCPU: 0.05, CPURatio: 1},
		{NP: 2, Measured: 150, Bound: 180, CPU: 0.052, BoundCPU: 0.05, CPURatio: 1.04},
	}
	var b bytes.Buffer
	if err := Table(&b, pts, 100); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "CPU-ms/sample        bound's CPU vs bound\n") || !strings.Contains(b.String(), "75.0%          0.052           0.05        1.04x\n") {
		t.Fatalf("table:\n%s", b.String())
	}
	b.Reset()
	if err := CPURatioLines(&b, append(pts, Point{NP: 4})); err != nil {
		t.Fatal(err)
	}
	if b.String() != "np=1 cpu_per_sample_ratio=1.00\nnp=2 cpu_per_sample_ratio=1.04\n" {
		t.Fatalf("ratio lines:\n%s", b.String())
	}
}

func TestPlotIsAPNG(t *testing.T) {
	var b bytes.Buffer
	if err := Plot(&b, "t", []Point{{NP: 1, Measured: 100, Bound: 100}, {NP: 2, Measured: 150, Bound: 180}, {NP: 4, Measured: 250, Bound: 330}}, 100); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if r := img.Bounds(); r.Dx() < 400 || r.Dy() < 250 {
		t.Fatalf("image %v", r)
	}
	b.Reset()
	if err := Plot(&b, "t", []Point{{NP: 2, Measured: 150, Bound: 180}}, 0); err != nil {
		t.Fatalf("a plot without the ideal: %v", err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatal(err)
	}
	if err := Plot(&b, "t", nil, 1); err == nil {
		t.Fatal("an empty plot must fail")
	}
}

func TestCoreShare(t *testing.T) {
	for _, c := range []struct{ cpus, np, want int }{
		{16, 1, 16}, {16, 2, 8}, {16, 8, 2}, {16, 16, 1}, {2, 4, 1}, {2, 2, 1}, {3, 2, 1}, {4, 0, 4},
	} {
		if got := CoreShare(c.cpus, c.np); got != c.want {
			t.Errorf("CoreShare(%d, %d) = %d, want %d", c.cpus, c.np, got, c.want)
		}
	}
	if got := CoreShareEnv(16, 4); got != "GOMAXPROCS=4" {
		t.Errorf("CoreShareEnv(16, 4) = %q", got)
	}
}
