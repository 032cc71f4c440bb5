package autotune

import (
	"fmt"
	"io"
	"math"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config, Horovod's.
const (
	// DefaultMaxSamples is HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES.
	DefaultMaxSamples = 20
	// DefaultWarmupSamples is HOROVOD_AUTOTUNE_WARMUP_SAMPLES.
	DefaultWarmupSamples = 3
	// DefaultStepsPerSample is HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE.
	DefaultStepsPerSample = 10
	// DefaultNoise is HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE.
	DefaultNoise = 0.8
	// SamplesPerScore is the number of samples whose median is one score.
	SamplesPerScore = 5
)

// LogHeader is the header line of the CSV log (HOROVOD_AUTOTUNE_LOG). In
// the rows booleans are 0 or 1, torus_allreduce (not a knob here) is always
// 0, cycle_time_ms is in ms, tensor_fusion_threshold in MB and score in
// bytes per microsecond. With Choices, their columns (in bytes) follow
// score, so the first seven columns stay Horovod's.
const LogHeader = "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,tensor_fusion_threshold,score"

// Config configures a Tuner. Zero fields take the defaults.
type Config struct {
	// Initial is the setting the tuner starts from (and warms up with).
	Initial Params
	// Fixed names the knobs the user set explicitly (Dim or Bool names):
	// they keep their Initial values and are left out of the search.
	Fixed map[string]bool
	// Dims is the numeric space searched jointly; nil means DefaultDims.
	Dims []Dim
	// Bools is the categorical chain; nil means DefaultBools.
	Bools []Bool
	// MaxSamples is the number of scored settings of the Bayesian search
	// (the initial setting and the test points included); 0 means
	// DefaultMaxSamples.
	MaxSamples int
	// WarmupSamples is the number of scores discarded at the start; 0
	// means DefaultWarmupSamples, negative means none.
	WarmupSamples int
	// StepsPerSample is the number of observed steps per sample; 0 means
	// DefaultStepsPerSample.
	StepsPerSample int
	// Noise is the GP observation-noise variance (standardised units); 0
	// means DefaultNoise, negative means none.
	Noise float64
	// Seed seeds the random candidates of the EI maximiser.
	Seed int64
	// Choices are the multi-valued knobs tried after Bools, in order;
	// nil means none (the runtime passes DefaultChoices).
	Choices []Choice
	// Log, when not nil, receives the CSV log: LogHeader, then one row
	// per recorded (non-warm-up) score.
	Log io.Writer
}

type stage int

const (
	stageBayes stage = iota
	stageChain
	stageDone
)

// Tuner is the autotuning state machine. It is not safe for concurrent
// use; the runtime calls it from its one background loop.
type Tuner struct {
	cfg   Config
	dims  []Dim  // free numeric dims
	chain []knob // free Bools, then free Choices
	nSeed int
	rng   *rand.Rand
	gp    *GP

	cur   Params
	stage stage

	steps   int
	bytes   int64
	elapsed time.Duration
	samples []float64
	warmup  int

	xs     [][]float64
	ys     []float64
	params []Params
	seed   int

	link  int     // index into chain of the knob being tried
	try   int     // index into its values of the value being tried
	bestS float64 // the best score of the knob's values so far
	bestV int64   // and its value
	base  Params

	err error
}

// NewTuner returns a tuner at cfg.Initial. The CSV header is written to
// cfg.Log at once.
func NewTuner(cfg Config) *Tuner {
	if cfg.Dims == nil {
		cfg.Dims = DefaultDims()
	}
	if cfg.Bools == nil {
		cfg.Bools = DefaultBools()
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = DefaultMaxSamples
	}
	if cfg.WarmupSamples == 0 {
		cfg.WarmupSamples = DefaultWarmupSamples
	} else if cfg.WarmupSamples < 0 {
		cfg.WarmupSamples = 0
	}
	if cfg.StepsPerSample <= 0 {
		cfg.StepsPerSample = DefaultStepsPerSample
	}
	if cfg.Noise == 0 {
		cfg.Noise = DefaultNoise
	} else if cfg.Noise < 0 {
		cfg.Noise = 0
	}
	t := &Tuner{
		cfg:    cfg,
		cur:    cfg.Initial,
		warmup: cfg.WarmupSamples,
		rng:    rand.New(rand.NewSource(cfg.Seed)),
		gp:     NewGP(cfg.Noise, 0),
		nSeed:  -1,
	}
	for _, d := range cfg.Dims {
		if cfg.Fixed[d.Name] {
			continue
		}
		t.dims = append(t.dims, d)
		if t.nSeed < 0 || len(d.Seeds) < t.nSeed {
			t.nSeed = len(d.Seeds)
		}
	}
	if t.nSeed < 0 {
		t.nSeed = 0
	}
	for _, b := range cfg.Bools {
		if !cfg.Fixed[b.Name] {
			t.chain = append(t.chain, boolKnob(b))
		}
	}
	for _, c := range cfg.Choices {
		if !cfg.Fixed[c.Name] && len(c.Values) > 1 {
			t.chain = append(t.chain, choiceKnob(c))
		}
	}
	if cfg.Log != nil {
		h := LogHeader
		for _, c := range cfg.Choices {
			h += "," + c.Name
		}
		t.write(h + "\n")
	}
	if len(t.dims) == 0 {
		t.startChain(t.cur)
	}
	return t
}

// Current returns the setting in force.
func (t *Tuner) Current() Params { return t.cur }

// Done reports whether tuning has finished; Current is then the final
// setting.
func (t *Tuner) Done() bool { return t.stage == stageDone }

// Err returns the first error writing the log, if any.
func (t *Tuner) Err() error { return t.err }

// Observe records one training step that allreduced bytes in
// elapsed under the Current setting. Every StepsPerSample steps it takes a
// sample (bytes per microsecond); every SamplesPerScore samples their
// median scores the setting and, past the warm-up, the tuner moves on. It
// returns whether the setting changed, the setting now in force, and
// whether tuning is done. Steps of zero total duration give no sample.
func (t *Tuner) Observe(bytes int64, elapsed time.Duration) (changed bool, p Params, done bool) {
	if t.stage == stageDone {
		return false, t.cur, true
	}
	t.steps++
	t.bytes += bytes
	t.elapsed += elapsed
	if t.steps < t.cfg.StepsPerSample {
		return false, t.cur, false
	}
	if t.elapsed > 0 {
		us := float64(t.elapsed) / float64(time.Microsecond)
		t.samples = append(t.samples, float64(t.bytes)/us)
	}
	t.steps, t.bytes, t.elapsed = 0, 0, 0
	if len(t.samples) < SamplesPerScore {
		return false, t.cur, false
	}
	score := median(t.samples)
	t.samples = t.samples[:0]
	if t.warmup > 0 {
		t.warmup--
		return false, t.cur, false
	}
	old := t.cur
	t.record(score)
	return t.cur != old, t.cur, t.stage == stageDone
}

func median(s []float64) float64 {
	c := append([]float64(nil), s...)
	sort.Float64s(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// record logs the score of the current setting and moves to the next one.
func (t *Tuner) record(score float64) {
	t.logRow(t.cur, score)
	switch t.stage {
	case stageBayes:
		t.xs = append(t.xs, t.point(t.cur))
		t.ys = append(t.ys, score)
		t.params = append(t.params, t.cur)
		if len(t.ys) >= t.cfg.MaxSamples {
			t.startChain(t.bestNumeric())
			return
		}
		var u []float64
		if t.seed < t.nSeed {
			u = make([]float64, len(t.dims))
			for i, d := range t.dims {
				u[i] = d.normalise(d.Seeds[t.seed])
			}
			t.seed++
		} else {
			u = t.proposeEI()
		}
		for i, d := range t.dims {
			d.Set(&t.cur, d.denormalise(u[i]))
		}
	case stageChain:
		k := t.chain[t.link]
		if t.try == 0 || score > t.bestS {
			t.bestS, t.bestV = score, k.values[t.try]
		}
		t.try++
		if t.try < len(k.values) {
			k.set(&t.cur, k.values[t.try])
			return
		}
		k.set(&t.base, t.bestV)
		t.link++
		t.startChain(t.base)
	}
}

// point is p's normalised coordinates in the free dims.
func (t *Tuner) point(p Params) []float64 {
	u := make([]float64, len(t.dims))
	for i, d := range t.dims {
		u[i] = d.normalise(d.Get(p))
	}
	return u
}

// proposeEI fits the GP to the scores so far and maximises EI; when the
// fit fails it falls back to a uniformly random point.
func (t *Tuner) proposeEI() []float64 {
	if err := t.gp.Fit(t.xs, t.ys); err != nil {
		u := make([]float64, len(t.dims))
		for i := range u {
			u[i] = t.rng.Float64()
		}
		return u
	}
	best := math.Inf(-1)
	for _, y := range t.ys {
		best = math.Max(best, y)
	}
	return MaximizeEI(t.gp, len(t.dims), best, 0.1*t.gp.TargetScale(), t.rng)
}

// bestNumeric is the scored setting of highest GP posterior mean (which
// discounts noise), or of highest score when the GP cannot be fitted.
func (t *Tuner) bestNumeric() Params {
	val := t.ys
	if err := t.gp.Fit(t.xs, t.ys); err == nil {
		val = make([]float64, len(t.xs))
		for i, x := range t.xs {
			val[i], _ = t.gp.Predict(x)
		}
	}
	bi := 0
	for i, v := range val {
		if v > val[bi] {
			bi = i
		}
	}
	return t.params[bi]
}

// startChain tries the chain's knob t.link (its first value first: false
// for a Bool) on top of base, or finishes at base when the chain is
// exhausted. A value beats the earlier ones only with a higher score, so
// a Bool turns true only when that scores better.
func (t *Tuner) startChain(base Params) {
	t.base = base
	t.cur = base
	if t.link >= len(t.chain) {
		t.stage = stageDone
		return
	}
	t.stage = stageChain
	t.try = 0
	k := t.chain[t.link]
	k.set(&t.cur, k.values[0])
}

func (t *Tuner) logRow(p Params, score float64) {
	if t.cfg.Log == nil {
		return
	}
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	row := []string{
		b(p.HierarchicalAllreduce), b(p.HierarchicalAllgather), "0", b(p.CacheEnabled),
		f(float64(p.CycleTime) / float64(time.Millisecond)),
		f(float64(p.FusionBytes) / MB),
		f(score),
	}
	for _, c := range t.cfg.Choices {
		row = append(row, strconv.FormatInt(c.Get(p), 10))
	}
	t.write(strings.Join(row, ",") + "\n")
}

func (t *Tuner) write(s string) {
	if t.err != nil {
		return
	}
	if _, err := io.WriteString(t.cfg.Log, s); err != nil {
		t.err = fmt.Errorf("autotune: writing log: %w", err)
	}
}
