package scaling

import (
	"bytes"
	"errors"
	"image/png"
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
