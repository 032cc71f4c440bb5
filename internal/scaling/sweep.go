package scaling

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Setting is one configuration of a sweep: a name for the table and the
// environment variables (KEY=VALUE) it runs under.
type Setting struct {
	Name string
	Env  []string
	// Tuned marks the autotuned run (HOROVOD_AUTOTUNE=1), which is
	// compared with the best fixed setting.
	Tuned bool
	// Default marks the run at the runtime's defaults.
	Default bool
}

// Grid returns the sweep's settings: the defaults, every fusion threshold
// (MiB) by cycle time (ms) pair, and the autotuned run. A pair equal to
// the defaults (fusionDefault MiB, cycleDefault ms) is left out: the
// defaults' row stands for it.
func Grid(fusionMiB, cycleMs []float64, fusionDefault, cycleDefault float64) []Setting {
	ss := []Setting{{Name: fmt.Sprintf("defaults (%g MiB, %g ms)", fusionDefault, cycleDefault), Default: true}}
	for _, f := range fusionMiB {
		for _, c := range cycleMs {
			if f == fusionDefault && c == cycleDefault {
				continue
			}
			ss = append(ss, Setting{
				Name: fmt.Sprintf("%g MiB, %g ms", f, c),
				Env: []string{
					"HOROVOD_FUSION_THRESHOLD=" + strconv.FormatInt(int64(math.Round(f*(1<<20))), 10),
					"HOROVOD_CYCLE_TIME=" + strconv.FormatFloat(c, 'f', -1, 64),
				},
			})
		}
	}
	return append(ss, Setting{Name: "autotuned", Env: []string{"HOROVOD_AUTOTUNE=1"}, Tuned: true})
}

// ErrStillTuning is returned by Rate when the measured part of an
// autotuned run began before the tuner had finished.
var ErrStillTuning = errors.New("scaling: autotuning had not finished when the measured part began " +
	"(run more epochs or steps, or lower HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE)")

var totalRE = regexp.MustCompile(`samples_per_s_total=([0-9.eE+-]+)`)

// Rate reads a run's throughput from its output: the last epoch line's
// samples/s (examples/mnist's format, lines may carry mpirun's tags; the
// last epoch is the warmest, the first pays for start-up; an epoch
// marked "(autotuning)" began while
// the tuner still moved the settings) or samples_per_s_total
// (examples/synthetic, whose autotuning_unfinished=true says the same).
// Such a run is refused with ErrStillTuning.
func Rate(output io.Reader) (float64, error) {
	sc := bufio.NewScanner(output)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	v, found := 0.0, false
	epochTuning, unfinished := false, false // mnist's mark on the last epoch; synthetic's report
	for sc.Scan() {
		line := sc.Text()
		m := samplesRE.FindStringSubmatch(line)
		if m == nil {
			m = totalRE.FindStringSubmatch(line)
			if m != nil {
				m = []string{m[0], "", m[1]}
			}
		}
		if m != nil {
			f, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return 0, fmt.Errorf("scaling: %q: %w", m[0], err)
			}
			v, found = f, true
			epochTuning = strings.Contains(line, "(autotuning)")
		}
		if strings.Contains(line, "autotuning_unfinished=true") {
			unfinished = true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, ErrNoThroughput
	}
	if epochTuning || unfinished {
		return 0, ErrStillTuning
	}
	return v, nil
}

// Median returns the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Order returns the order in which round r runs n settings: each round
// starts one setting later, so that no setting always runs first (or
// right after the same one) on a machine whose speed drifts.
func Order(n, r int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = (i + r) % n
	}
	return o
}

// SweepResult summarises a sweep: the median samples/s of each setting
// over the rounds, the best fixed setting (the defaults included), and the
// ratios of the tuned run to it and to the defaults.
type SweepResult struct {
	Settings  []Setting
	Medians   []float64
	Best      int     // index of the best fixed setting
	Tuned     int     // index of the autotuned run (-1: none)
	Default   int     // index of the defaults (-1: none)
	VsBest    float64 // tuned / best fixed
	VsDefault float64 // tuned / defaults
}

// Summarize computes the SweepResult of rates[i], the samples/s of every
// round of setting i.
func Summarize(settings []Setting, rates [][]float64) (SweepResult, error) {
	if len(settings) != len(rates) {
		return SweepResult{}, fmt.Errorf("scaling: %d settings, %d rate lists", len(settings), len(rates))
	}
	res := SweepResult{Settings: settings, Medians: make([]float64, len(settings)), Best: -1, Tuned: -1, Default: -1}
	for i, s := range settings {
		res.Medians[i] = Median(rates[i])
		switch {
		case s.Tuned:
			res.Tuned = i
		case res.Best < 0 || res.Medians[i] > res.Medians[res.Best]:
			res.Best = i
		}
		if s.Default {
			res.Default = i
		}
	}
	if res.Best < 0 {
		return res, errors.New("scaling: no fixed setting")
	}
	if res.Tuned >= 0 {
		res.VsBest = res.Medians[res.Tuned] / res.Medians[res.Best]
		if res.Default >= 0 {
			res.VsDefault = res.Medians[res.Tuned] / res.Medians[res.Default]
		}
	}
	return res, nil
}

// SweepTable writes one line per setting (its median samples/s, its ratio
// to the best fixed setting, and every round's figure), then the verdict
// lines: tuned against the best fixed setting and against the defaults.
func SweepTable(w io.Writer, res SweepResult, rates [][]float64) error {
	if _, err := fmt.Fprintf(w, "%-26s %12s %9s  %s\n", "setting", "samples/s", "vs best", "rounds"); err != nil {
		return err
	}
	for i, s := range res.Settings {
		mark := " "
		if i == res.Best {
			mark = "*"
		}
		rounds := make([]string, len(rates[i]))
		for k, r := range rates[i] {
			rounds[k] = strconv.FormatFloat(r, 'f', 0, 64)
		}
		if _, err := fmt.Fprintf(w, "%-26s %12.0f %8.1f%%%s %s\n", s.Name, res.Medians[i],
			100*res.Medians[i]/res.Medians[res.Best], mark, strings.Join(rounds, " ")); err != nil {
			return err
		}
	}
	if res.Tuned < 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "autotuned / best fixed (%s): %.1f%%\n", res.Settings[res.Best].Name, 100*res.VsBest)
	if err == nil && res.Default >= 0 {
		_, err = fmt.Fprintf(w, "autotuned / defaults: %.1f%%\n", 100*res.VsDefault)
	}
	return err
}
