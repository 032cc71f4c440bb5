package scaling

import (
	"bufio"
	"errors"
	"fmt"
	"image/color"
	"io"
	"regexp"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Point is one process count's measurements, in samples per second.
type Point struct {
	NP       int
	Measured float64 // the data-parallel job over NP ranks
	Bound    float64 // NP independent single-rank jobs running at once, summed
	// Paired is the median over rounds of each round's Measured/Bound
	// (0: one round, or not known): on a machine whose load drifts, the
	// job and the bound of one round saw about the same load, so this
	// ratio is steadier than the ratio of the medians.
	Paired float64
	// CPU is the job's CPU milliseconds per sample, every rank's summed
	// (the median over rounds; 0: the program does not print it).
	CPU float64
	// BoundCPU is the bound's CPU milliseconds per sample: the mean of
	// its single-rank copies' (the median over rounds; 0: not known).
	BoundCPU float64
	// CPURatio is the median over rounds of each round's CPU over the
	// bound's CPU of the same round, that is over the CPU per sample of a
	// single-rank job at the job's cores per rank (0: not known).
	CPURatio float64
}

// Ideal is NP times the single-rank throughput single.
func (p Point) Ideal(single float64) float64 { return float64(p.NP) * single }

// Efficiency is Measured over Bound (0 when there is no bound).
func (p Point) Efficiency() float64 {
	if p.Bound <= 0 {
		return 0
	}
	return p.Measured / p.Bound
}

var samplesRE = regexp.MustCompile(`epoch (\d+):.*?([0-9.]+) samples/s`)

var cpuRE = regexp.MustCompile(`epoch \d+:.*?([0-9.eE+-]+) CPU-ms/sample`)

// ErrNoCPU is returned by CPUPerSample when the output's epoch lines carry
// no CPU-ms/sample figure.
var ErrNoCPU = errors.New("scaling: no \"epoch N: ... X CPU-ms/sample\" line in the output")

// CPUPerSample reads a run's CPU milliseconds per sample, every rank's
// summed, from its output: the last epoch line's CPU-ms/sample
// (examples/mnist's format), the same epoch that Rate reads.
func CPUPerSample(output io.Reader) (float64, error) {
	sc := bufio.NewScanner(output)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	v, found := 0.0, false
	for sc.Scan() {
		if !samplesRE.MatchString(sc.Text()) {
			continue
		}
		found = false // a later epoch line without the figure
		if m := cpuRE.FindStringSubmatch(sc.Text()); m != nil {
			f, err := strconv.ParseFloat(m[1], 64)
			if err != nil || f < 0 {
				return 0, fmt.Errorf("scaling: bad CPU figure %q", m[0])
			}
			v, found = f, true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, ErrNoCPU
	}
	return v, nil
}

// ErrNoThroughput is returned when output holds no epoch line with a
// samples/s figure.
var ErrNoThroughput = errors.New("scaling: no \"epoch N: ... X samples/s\" line in the output")

// CoreShare is the cores (GOMAXPROCS) of each of np ranks on a machine of
// cpus cores: an equal share, at least one.
func CoreShare(cpus, np int) int { return max(1, cpus/max(1, np)) }

// CoreShareEnv is the environment entry that gives each of np processes on
// a machine of cpus cores its CoreShare: scalebench sets it for the job's
// ranks and for the bound's independent copies alike, so that the bound
// runs at the same cores per rank (a copy left alone would take every
// core, as a single-rank job does).
func CoreShareEnv(cpus, np int) string {
	return "GOMAXPROCS=" + strconv.Itoa(CoreShare(cpus, np))
}

// Table writes one line per point: np, measured, bound, ideal, and the
// efficiency against the bound and against the ideal, and, when some
// point has one, the paired efficiency. single is the one-rank
// throughput; 0 when it was not measured, and the ideal columns then
// read "-".
func Table(w io.Writer, pts []Point, single float64) error {
	paired, cpu := false, false
	for _, p := range pts {
		paired = paired || p.Paired > 0
		cpu = cpu || p.CPU > 0
	}
	head := fmt.Sprintf("%4s %12s %12s %12s %10s %10s", "np", "samples/s", "bound", "ideal", "vs bound", "vs ideal")
	if paired {
		head += fmt.Sprintf(" %18s", "vs bound (paired)")
	}
	if cpu {
		head += fmt.Sprintf(" %14s %14s %12s", "CPU-ms/sample", "bound's", "CPU vs bound")
	}
	if _, err := fmt.Fprintln(w, head); err != nil {
		return err
	}
	for _, p := range pts {
		ideal, vsIdeal := "-", "-"
		if single > 0 {
			ideal = fmt.Sprintf("%.0f", p.Ideal(single))
			vsIdeal = fmt.Sprintf("%.1f%%", 100*p.Measured/p.Ideal(single))
		}
		line := fmt.Sprintf("%4d %12.0f %12.0f %12s %9.1f%% %10s",
			p.NP, p.Measured, p.Bound, ideal, 100*p.Efficiency(), vsIdeal)
		if paired {
			line += fmt.Sprintf(" %17.1f%%", 100*p.Paired)
		}
		if cpu {
			line += fmt.Sprintf(" %14.4g %14.4g %11.2fx", p.CPU, p.BoundCPU, p.CPURatio)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// PairedRatio is the median over rounds of xs[r]/base[r], over the rounds
// where both are known (positive); 0 when there is none. Each round's
// figures saw about the same machine, so the ratio is steadier than the
// ratio of the medians.
func PairedRatio(xs, base []float64) float64 {
	var rs []float64
	for r := range min(len(xs), len(base)) {
		if xs[r] > 0 && base[r] > 0 {
			rs = append(rs, xs[r]/base[r])
		}
	}
	return Median(rs)
}

// CPURatioLines writes, for scripts, one line per point with a CPU ratio,
// of the form "np=2 cpu_per_sample_ratio=1.04": the job's CPU per sample
// over the single-rank jobs' at the same cores per rank (Point.CPURatio).
func CPURatioLines(w io.Writer, pts []Point) error {
	for _, p := range pts {
		if p.CPURatio <= 0 {
			continue
		}
		if _, err := fmt.Fprintf(w, "np=%d cpu_per_sample_ratio=%.2f\n", p.NP, p.CPURatio); err != nil {
			return err
		}
	}
	return nil
}

// Plot draws samples/s against np: the ideal (np times one rank's; none
// when single is 0), the bound and the measured lines, titled title, as a
// PNG of 6 x 4 inches written to w.
func Plot(w io.Writer, title string, pts []Point, single float64) error {
	if len(pts) == 0 {
		return errors.New("scaling: nothing to plot")
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "ranks (np)"
	p.Y.Label.Text = "samples/s"
	p.Legend.Top, p.Legend.Left = true, true
	// From zero, ticks at the process counts measured.
	p.Y.Min = 0
	var ticks []plot.Tick
	for _, pt := range pts {
		ticks = append(ticks, plot.Tick{Value: float64(pt.NP), Label: strconv.Itoa(pt.NP)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	ideal, bound, measured := make(plotter.XYs, len(pts)), make(plotter.XYs, len(pts)), make(plotter.XYs, len(pts))
	for i, pt := range pts {
		x := float64(pt.NP)
		ideal[i] = plotter.XY{X: x, Y: pt.Ideal(single)}
		bound[i] = plotter.XY{X: x, Y: pt.Bound}
		measured[i] = plotter.XY{X: x, Y: pt.Measured}
	}
	type series struct {
		name string
		xys  plotter.XYs
		c    color.RGBA
		dash bool
	}
	lines := []series{
		{"bound (np independent jobs)", bound, color.RGBA{30, 110, 200, 255}, true},
		{"measured", measured, color.RGBA{210, 60, 40, 255}, false},
	}
	if single > 0 {
		lines = append([]series{{"ideal (np x one rank)", ideal, color.RGBA{150, 150, 150, 255}, true}}, lines...)
	}
	for _, l := range lines {
		line, points, err := plotter.NewLinePoints(l.xys)
		if err != nil {
			return err
		}
		line.Color, points.Color = l.c, l.c
		if l.dash {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line, points)
		p.Legend.Add(l.name, line, points)
	}
	p.Y.Max *= 1.3 // room for the legend above the lines
	wt, err := p.WriterTo(6*vg.Inch, 4*vg.Inch, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}
