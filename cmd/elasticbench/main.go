package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/gohorovod/gohorovod/internal/elasticbench"
	"github.com/gohorovod/gohorovod/internal/mlp"
)

func main() {
	err := run(os.Args[1:], os.Stdout)
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "elasticbench:", err)
		os.Exit(1)
	}
}

// options are the command-line settings.
type options struct {
	runs, steps, commits, reps int
	every                      int     // a commit every this many steps
	goal                       float64 // percent of the step time
	hidden                     []int
	batch                      int
	stateMiB, tensors          int
}

func parse(args []string) (options, error) {
	var o options
	var hidden string
	fs := pflag.NewFlagSet("elasticbench", pflag.ContinueOnError)
	fs.IntVar(&o.runs, "runs", 11, "measured runs; the table shows medians over them")
	fs.IntVar(&o.steps, "steps", 20, "MNIST training steps timed per run")
	fs.IntVar(&o.commits, "commits", 20, "MNIST commits timed per run")
	fs.IntVar(&o.reps, "reps", 3, "big-state commits and copies timed per run, alternating")
	fs.IntVar(&o.every, "every", 10, "steps between two commits: the MNIST ratio is commit/(every·step)")
	fs.Float64Var(&o.goal, "goal", 5, "the MNIST ratio's goal, in percent")
	fs.StringVar(&hidden, "hidden", "256,128", "hidden layer widths of the MNIST MLP")
	fs.IntVar(&o.batch, "batch", 64, "MNIST batch size")
	fs.IntVar(&o.stateMiB, "state-mib", 100, "size of the big state in MiB: half float32 parameters, half their momentum")
	fs.IntVar(&o.tensors, "tensors", 50, "parameter tensors of the big state")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.runs < 1 || o.steps < 1 || o.commits < 1 || o.reps < 1 || o.every < 1 || o.batch < 1 || o.stateMiB < 1 || o.tensors < 1 {
		return o, errors.New("--runs, --steps, --commits, --reps, --every, --batch, --state-mib and --tensors must be positive")
	}
	var err error
	o.hidden, err = mlp.ParseWidths(hidden)
	return o, err
}

// sample is one run's measurements: the time of one MNIST step, one MNIST
// commit, one big commit and one copy of as many bytes.
type sample struct {
	step, commit, big, copy time.Duration
}

// results are the medians over the runs.
type results struct {
	step, commit, big, copy time.Duration
	commitPct               float64 // commit/(every·step), in percent
	bigOverCopy             float64
}

func run(args []string, out io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	m, err := elasticbench.NewMNIST(o.hidden, o.batch, 1)
	if err != nil {
		return err
	}
	big, err := elasticbench.NewBig(o.stateMiB<<20, o.tensors)
	if err != nil {
		return err
	}
	n := big.SnapshotBytes()
	dst, src := elasticbench.NewCopy(n)

	var samples []sample
	for r := -1; r < o.runs; r++ { // run -1 warms up
		s, err := measure(o, m, big, dst, src)
		if err != nil {
			return err
		}
		if r >= 0 {
			samples = append(samples, s)
		}
	}
	res := summarize(o, samples)
	return report(out, o, m, big, res)
}

// measure does one run: the steps, the MNIST commits, then the big commits
// alternating with the copies.
func measure(o options, m *elasticbench.MNIST, big *elasticbench.Big, dst, src []byte) (sample, error) {
	var s sample
	t := time.Now()
	for range o.steps {
		if err := m.Step(); err != nil {
			return s, err
		}
	}
	s.step = time.Since(t) / time.Duration(o.steps)
	t = time.Now()
	for range o.commits {
		if err := m.State.Commit(); err != nil {
			return s, err
		}
	}
	s.commit = time.Since(t) / time.Duration(o.commits)
	for range o.reps {
		t = time.Now()
		if err := big.State.Commit(); err != nil {
			return s, err
		}
		s.big += time.Since(t)
		t = time.Now()
		copy(dst, src)
		s.copy += time.Since(t)
	}
	s.big /= time.Duration(o.reps)
	s.copy /= time.Duration(o.reps)
	return s, nil
}

func summarize(o options, ss []sample) results {
	pick := func(f func(sample) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		return median(xs)
	}
	return results{
		step:   time.Duration(pick(func(s sample) float64 { return float64(s.step) })),
		commit: time.Duration(pick(func(s sample) float64 { return float64(s.commit) })),
		big:    time.Duration(pick(func(s sample) float64 { return float64(s.big) })),
		copy:   time.Duration(pick(func(s sample) float64 { return float64(s.copy) })),
		commitPct: pick(func(s sample) float64 {
			return 100 * float64(s.commit) / (float64(o.every) * float64(max(s.step, 1)))
		}),
		bigOverCopy: pick(func(s sample) float64 { return float64(s.big) / float64(max(s.copy, 1)) }),
	}
}

// median returns the middle value of xs (the upper one of an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func report(out io.Writer, o options, m *elasticbench.MNIST, big *elasticbench.Big, r results) error {
	widths := append(append([]int{elasticbench.Pixels}, o.hidden...), elasticbench.Classes)
	mb, bb := m.SnapshotBytes(), big.SnapshotBytes()
	fmt.Fprintf(out, "elasticbench: medians of %d runs; a run: %d MNIST steps, %d MNIST commits, %d × (big commit, copy); GOMAXPROCS %d\n",
		o.runs, o.steps, o.commits, o.reps, goruntime.GOMAXPROCS(0))
	fmt.Fprintf(out, "MNIST state: MLP %v, %d float32 parameters and their SGD momentum (%s), the sampler's position, epoch and batch\n",
		widths, m.NumParams(), sizeOf(mb))
	fmt.Fprintf(out, "%d MiB state: %d float32 parameters in %d tensors (%s) and their SGD momentum (%s)\n\n",
		o.stateMiB, bb/8, o.tensors, sizeOf(bb/2), sizeOf(bb/2))
	verdict := "met"
	if r.commitPct >= o.goal {
		verdict = "missed"
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measured\ttime\trate\tyardstick\ttime\trate\tratio\tgoal")
	fmt.Fprintf(tw, "MNIST step\t%s\t%.0f samples/s\t-\t-\t-\t-\t-\n",
		dur(r.step), float64(m.BatchSize())/r.step.Seconds())
	fmt.Fprintf(tw, "MNIST commit\t%s\t%s\t%d MNIST steps\t%s\t-\t%.3g%%\t< %g%% (%s)\n",
		dur(r.commit), rate(mb, r.commit), o.every, dur(time.Duration(o.every)*r.step), r.commitPct, o.goal, verdict)
	fmt.Fprintf(tw, "%d MiB commit\t%s\t%s\tcopy of %d MiB\t%s\t%s\t%.3gx\t-\n",
		o.stateMiB, dur(r.big), rate(bb, r.big), o.stateMiB, dur(r.copy), rate(bb, r.copy), r.bigOverCopy)
	return tw.Flush()
}

// dur prints d with three significant digits in µs, ms or s.
func dur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3g s", d.Seconds())
}

// rate prints n bytes per d in GB/s (10⁹ bytes per second).
func rate(n int, d time.Duration) string {
	return fmt.Sprintf("%.3g GB/s", float64(n)/max(d.Seconds(), 1e-12)/1e9)
}

// sizeOf prints n bytes in MiB, or KiB below one MiB.
func sizeOf(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.3g KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.3g MiB", float64(n)/(1<<20))
}
