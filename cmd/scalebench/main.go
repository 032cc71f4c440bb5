package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gohorovod/gohorovod/internal/scaling"
	"github.com/gohorovod/gohorovod/runtime/config"
)

func main() {
	program := flag.String("program", "bin/mnist", "the training program (prints \"epoch N: ... X samples/s\")")
	launcher := flag.String("launcher", "scripts/mpirun.sh", "runs the program at np ranks as LAUNCHER NP PROGRAM ARGS...")
	minNP := flag.Int("min-np", 1, "smallest np (np doubles from it); above 1 the table has no ideal, which is np times one rank's")
	maxNP := flag.Int("max-np", runtime.NumCPU(), "largest np (np doubles from -min-np)")
	pngPath := flag.String("png", "scaling.png", "where to write the plot (empty: none)")
	title := flag.String("title", "", "the plot's title (default: the program and this machine's cores)")
	sweep := flag.Bool("sweep", false, "instead of scaling: at -np ranks, run the defaults, every -fusion by -cycle setting and an autotuned run, -rounds times interleaved, and compare the tuned run with the best fixed setting")
	np := flag.Int("np", 2, "with -sweep: the ranks")
	fusions := flag.String("fusion", "1,4,16,64", "with -sweep: fusion thresholds in MiB")
	cycles := flag.String("cycle", "1,5,25", "with -sweep: cycle times in ms")
	rounds := flag.Int("rounds", 3, "runs of each np's job and bound (with -sweep: of each setting), interleaved; the table gives their medians")
	var variants variantFlag
	flag.Var(&variants, "variant", "a variant of the job: space-separated VAR=VALUE settings added to its environment ("+programVar+"=PATH runs another build of the program); repeat it to compare variants, each run in every round beside the same bound, in rotated order, with a table each (default: one job as the environment has it)")
	flag.Parse()
	args := flag.Args()
	if *sweep {
		if err := runSweep(*launcher, *np, *program, args, *fusions, *cycles, *rounds); err != nil {
			fail(err)
		}
		return
	}
	if *minNP < 1 || *maxNP < *minNP || *rounds < 1 {
		fail(fmt.Errorf("-min-np %d, -max-np %d, -rounds %d: want 1 <= min-np <= max-np and at least 1 round", *minNP, *maxNP, *rounds))
	}
	// Every round measures each np's job and bound, alternating which
	// goes first, so that both see about the same machine load; the
	// table has the medians over the rounds.
	var nps []int
	for np := *minNP; np <= *maxNP; np *= 2 {
		nps = append(nps, np)
	}
	if len(variants) == 0 {
		variants = variantFlag{nil}
	}
	m := newMeasurements(len(variants), len(nps))
	for r := range *rounds {
		m.round(r, nps, variants, *launcher, *program, args)
	}
	var pts []scaling.Point
	single := 0.0
	for v := range variants {
		pts, single = m.points(v, nps, *rounds > 1)
		fmt.Printf("%s%s, %d rounds, median samples/s\n", *program, variants.name(v), *rounds)
		if err := scaling.Table(os.Stdout, pts, single); err != nil {
			fail(err)
		}
		if err := scaling.CPURatioLines(os.Stdout, pts); err != nil {
			fail(err)
		}
	}
	if *pngPath == "" {
		return
	}
	t := *title
	if t == "" {
		t = fmt.Sprintf("%s on %d cores", *program, runtime.NumCPU())
	}
	if err := plot(*pngPath, t, pts, single); err != nil {
		fail(err)
	}
	fmt.Println("plot:", *pngPath)
}

// measurements are the rounds' figures: measured[v][k], cpu[v][k]:
// variant v's job at the k-th np, each round's; bound[k], boundCPU[k]:
// the single-rank copies' (CPU: their mean).
type measurements struct {
	measured, cpu   [][][]float64
	bound, boundCPU [][]float64
}

func newMeasurements(variants, nps int) *measurements {
	m := &measurements{measured: make([][][]float64, variants), cpu: make([][][]float64, variants),
		bound: make([][]float64, nps), boundCPU: make([][]float64, nps)}
	for v := range variants {
		m.measured[v], m.cpu[v] = make([][]float64, nps), make([][]float64, nps)
	}
	return m
}

// round r runs, at each np, every variant's job and the bound once.
func (m *measurements) round(r int, nps []int, variants variantFlag, launcher, program string, args []string) {
	nv := len(variants)
	for k, np := range nps {
		// Every rank, of the job and of the bound, gets the same share
		// of the cores (GOMAXPROCS), so that the bound differs from the
		// job only in communication.
		env := []string{scaling.CoreShareEnv(runtime.NumCPU(), np)}
		// Job nv is the bound; the order rotates from round to round and
		// np to np, so that every run sees about the same machine load.
		for _, job := range scaling.Order(nv+1, r+k) {
			if job == nv {
				b, bc, err := independent(env, np, program, args)
				if err != nil {
					fail(fmt.Errorf("np %d (bound): %w", np, err))
				}
				m.bound[k], m.boundCPU[k] = append(m.bound[k], b), append(m.boundCPU[k], bc)
				fmt.Fprintf(os.Stderr, "scalebench: round %d: np %d: bound %.0f samples/s, CPU-ms/sample %.4g\n", r+1, np, b, bc)
				continue
			}
			v, c, err := launched(append(env, variants[job]...), launcher, np, variants.program(job, program), args)
			if err != nil {
				fail(fmt.Errorf("np %d (job%s): %w", np, variants.name(job), err))
			}
			m.measured[job][k], m.cpu[job][k] = append(m.measured[job][k], v), append(m.cpu[job][k], c)
			fmt.Fprintf(os.Stderr, "scalebench: round %d: np %d%s: %.0f samples/s, CPU-ms/sample %.4g\n", r+1, np, variants.name(job), v, c)
		}
	}
}

// points returns variant v's table: a point per np, the medians over the
// rounds (with the paired ratios when there were several), and the single
// rank's rate (0 when np 1 is not measured).
func (m *measurements) points(v int, nps []int, paired bool) (pts []scaling.Point, single float64) {
	for k, np := range nps {
		p := scaling.Point{NP: np, Measured: scaling.Median(m.measured[v][k]), Bound: scaling.Median(m.bound[k]),
			CPU: scaling.Median(m.cpu[v][k]), BoundCPU: scaling.Median(m.boundCPU[k])}
		// The CPU per sample against the single-rank jobs' of the same
		// round, which ran at the job's cores per rank: a single-rank job
		// given every core spends CPU on parallel kernels and idle
		// scheduler threads that np ranks of one core each do not, and
		// would flatter the job.
		p.CPURatio = scaling.PairedRatio(m.cpu[v][k], m.boundCPU[k])
		if paired {
			p.Paired = scaling.PairedRatio(m.measured[v][k], m.bound[k])
		}
		if np == 1 {
			single = p.Bound
		}
		pts = append(pts, p)
	}
	return pts, single
}

// plot writes the plot of pts, titled t, to the PNG file path.
func plot(path, t string, pts []scaling.Point, single float64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := scaling.Plot(f, t, pts, single); err != nil {
		return err
	}
	return f.Close()
}

// launched runs the program under the launcher at np ranks, with env added
// to the environment, and returns its samples/s and its CPU milliseconds
// per sample, every rank's summed (0 when the program does not print it).
func launched(env []string, launcher string, np int, program string, args []string) (rate, cpu float64, err error) {
	out, err := runEnv(env, launcher, append([]string{fmt.Sprint(np), program}, args...)...)
	if err != nil {
		return 0, 0, err
	}
	if rate, err = scaling.Rate(bytes.NewReader(out)); err != nil {
		return 0, 0, err
	}
	cpu, err = scaling.CPUPerSample(bytes.NewReader(out))
	if errors.Is(err, scaling.ErrNoCPU) {
		err = nil
	}
	return rate, cpu, err
}

// independent runs np single-rank copies of the program at once (no
// launcher: each is rank 0 of a job of one), with env added to the
// environment, and returns their summed samples/s and the mean of their
// CPU milliseconds per sample (0 unless every copy prints it).
func independent(env []string, np int, program string, args []string) (rate, cpu float64, err error) {
	rates := make([]float64, np)
	cpus := make([]float64, np)
	errs := make([]error, np)
	var wg sync.WaitGroup
	for i := range np {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := runEnv(env, program, args...)
			if err == nil {
				rates[i], err = scaling.Rate(bytes.NewReader(out))
			}
			if err == nil {
				if cpus[i], err = scaling.CPUPerSample(bytes.NewReader(out)); errors.Is(err, scaling.ErrNoCPU) {
					cpus[i], err = 0, nil
				}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	all := true
	for i, r := range rates {
		if errs[i] != nil {
			return 0, 0, fmt.Errorf("copy %d: %w", i, errs[i])
		}
		rate += r
		cpu += cpus[i] / float64(np)
		all = all && cpus[i] > 0
	}
	if !all {
		cpu = 0
	}
	return rate, cpu, nil
}

// runSweep measures the settings of scaling.Grid at np ranks, rounds
// times, each round in a rotated order, and prints the table.
func runSweep(launcher string, np int, program string, args []string, fusions, cycles string, rounds int) error {
	fs, err := floats(fusions)
	if err != nil {
		return fmt.Errorf("-fusion: %w", err)
	}
	cs, err := floats(cycles)
	if err != nil {
		return fmt.Errorf("-cycle: %w", err)
	}
	if np < 1 || rounds < 1 {
		return fmt.Errorf("-np %d, -rounds %d: want at least 1", np, rounds)
	}
	d := config.Default()
	settings := scaling.Grid(fs, cs, float64(d.FusionThreshold)/(1<<20), float64(d.CycleTime)/float64(time.Millisecond))
	rates := make([][]float64, len(settings))
	for r := range rounds {
		for _, i := range scaling.Order(len(settings), r) {
			s := settings[i]
			out, err := runEnv(s.Env, launcher, append([]string{fmt.Sprint(np), program}, args...)...)
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			rate, err := scaling.Rate(bytes.NewReader(out))
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			rates[i] = append(rates[i], rate)
			fmt.Fprintf(os.Stderr, "scalebench: round %d: %s: %.0f samples/s\n", r+1, s.Name, rate)
		}
	}
	res, err := scaling.Summarize(settings, rates)
	if err != nil {
		return err
	}
	fmt.Printf("%s at np %d, %d rounds, median samples/s\n", program, np, rounds)
	return scaling.SweepTable(os.Stdout, res, rates)
}

func floats(list string) ([]float64, error) {
	var vs []float64
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("bad value %q", f)
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// run returns a command's standard output; its standard error is passed on,
// and a failure quotes the output's tail.
func run(name string, args ...string) ([]byte, error) { return runEnv(nil, name, args...) }

// runEnv is run with env added to this process's environment.
func runEnv(env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		tail := out
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return nil, fmt.Errorf("%s: %w\n%s", name, err, tail)
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scalebench:", err)
	os.Exit(1)
}

// variantFlag collects -variant flags: each a list of VAR=VALUE settings.
type variantFlag [][]string

func (f *variantFlag) String() string {
	if f == nil {
		return ""
	}
	var parts []string
	for _, v := range *f {
		parts = append(parts, strings.Join(v, " "))
	}
	return strings.Join(parts, "; ")
}

func (f *variantFlag) Set(s string) error {
	kvs := strings.Fields(s)
	if len(kvs) == 0 {
		return errors.New("empty variant: want VAR=VALUE settings")
	}
	for _, kv := range kvs {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("%q is not VAR=VALUE", kv)
		}
	}
	*f = append(*f, kvs)
	return nil
}

// programVar, set in a variant, runs that variant's job with another
// program (another build of it, to compare builds beside one bound); the
// bound always runs -program.
const programVar = "SCALEBENCH_PROGRAM"

// program returns the program variant v's job runs: its programVar's
// value, or def.
func (f variantFlag) program(v int, def string) string {
	for _, kv := range f[v] {
		if k, val, _ := strings.Cut(kv, "="); k == programVar && val != "" {
			def = val
		}
	}
	return def
}

// name is variant v's label in the output: " [VAR=VALUE ...]", or nothing
// for the job as the environment has it.
func (f variantFlag) name(v int) string {
	if len(f[v]) == 0 {
		return ""
	}
	return " [" + strings.Join(f[v], " ") + "]"
}
