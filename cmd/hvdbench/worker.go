package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/cputime"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/mpicomm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// readShapes reads "name<TAB>AxBxC" lines ('#' comments) into element counts.
func readShapes(path string) ([]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var counts []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexByte(line, '\t'); i >= 0 {
			line = line[i+1:]
		}
		n := 1
		for _, d := range strings.Split(line, "x") {
			v, err := strconv.Atoi(strings.TrimSpace(d))
			if err != nil {
				return nil, fmt.Errorf("%s: bad shape %q", path, line)
			}
			n *= v
		}
		counts = append(counts, n)
	}
	return counts, sc.Err()
}

type workerArgs struct {
	shapes     string
	iters      int
	warmup     int
	thresholds []int64
	chunks     []int
	maxFused   []int64
	fchunks    []int64
	cases      []string
	cpuProfile string // rank 0 writes its CPU profile here when set
	// hierarchical turns on the hierarchical allreduce; the nodes come from
	// HOROVOD_HOSTNAME under mpirun, from the launcher's hosts under --gloo.
	hierarchical bool
}

// worker runs under mpirun: every rank runs it.
func worker(a workerArgs) error {
	var ctl control
	if c, err := config.FromEnv(os.LookupEnv); err == nil && c.Gloo() {
		// Started by gohorovodrun --gloo: no MPI; the runtime itself
		// (one Init per job: the rendezvous serves once) times the
		// steps, outside them.
		if len(a.thresholds)*len(a.chunks)*len(a.maxFused)*len(a.fchunks) != 1 {
			return fmt.Errorf("with the embedded transport, one setting of the knobs per run")
		}
	} else {
		mc, err := mpicomm.New() // timing control, separate from the runtime's
		if err != nil {
			return err
		}
		defer mpicomm.Finalize()
		defer mc.Close()
		ctl = mc
	}
	rank := func() int {
		if ctl != nil {
			return ctl.Rank()
		}
		return 0 // the profile is per process: every rank writes its own below
	}
	resnet, err := readShapes(a.shapes)
	if err != nil {
		return err
	}
	if a.cpuProfile != "" && rank() == 0 {
		stop, err := cputime.Profile(a.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	sets := map[string][]int{
		"resnet50": resnet,
		// ResNet-50's parameters, trained through the
		// DistributedOptimizer's own path.
		optimizerCase: resnet,
		"64MiB":       {16 << 20},
		"4KiBx1000":   slices.Repeat([]int{1024}, 1000),
		// One tensor of exactly the bytes of 4KiBx1000: what fusion can at
		// best make of them.
		"4MB": {1024 * 1000},
		// The same tensors as views of one flat buffer: the fused
		// response is reduced in place, whole, with no copies.
		"4KiBx1000" + flatSuffix: slices.Repeat([]int{1024}, 1000),
		"tinyx161":               slices.Repeat([]int{1}, 161),
		"tinyx1000":              slices.Repeat([]int{1}, 1000),
	}
	for _, name := range a.cases {
		if _, ok := sets[name]; !ok {
			return fmt.Errorf("unknown case %q", name)
		}
	}
	if ctl != nil {
		for _, name := range a.cases {
			if strings.HasSuffix(name, flatSuffix) {
				if err := runDirect(ctl, name, sets[name], a); err != nil {
					return err
				}
			}
		}
	}
	for _, thr := range a.thresholds {
		for _, chunk := range a.chunks {
			for _, mf := range a.maxFused {
				for _, fc := range a.fchunks {
					k := knobs{thr: thr, chunk: chunk, maxFused: mf, fchunk: int(fc)}
					if err := runConfig(ctl, sets, k, a); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// knobs is one setting of the runtime's tuning knobs (negative: the
// runtime's default).
type knobs struct {
	thr           int64
	chunk, fchunk int
	maxFused      int64
}

// runConfig runs every case on a runtime started with one setting of the
// knobs.
// control is what the workers time the steps with: MPI beside the runtime,
// or, on the embedded transport, the runtime itself (rtControl).
type control interface {
	Rank() int
	Size() int
	Allreduce(t *tensor.Tensor, op tensor.ReduceOp) error
	Barrier() error
}

// rtControl times through the runtime (outside the timed steps).
type rtControl struct {
	rt  *hvd.Runtime
	seq int
}

func (c *rtControl) Rank() int { return c.rt.Rank() }
func (c *rtControl) Size() int { return c.rt.Size() }
func (c *rtControl) Barrier() error {
	return c.rt.Barrier(context.Background())
}
func (c *rtControl) Allreduce(t *tensor.Tensor, op tensor.ReduceOp) error {
	c.seq++
	rop := hvd.Max
	if op != tensor.Max {
		return fmt.Errorf("hvdbench: control allreduce %v", op)
	}
	return c.rt.AllreduceInPlace(context.Background(), t, fmt.Sprintf("hvdbench.ctl.%d", c.seq), rop)
}

func runConfig(ctl control, sets map[string][]int, k knobs, a workerArgs) error {
	cfg := config.Default()
	cfg.FusionThreshold = k.thr
	cfg.HierarchicalAllreduce = a.hierarchical
	cfg.Hostname = os.Getenv(config.EnvHostname)
	// One runtime serves every case: cache every case's names, as a
	// training job caches its model's, rather than measure evictions.
	names := 1 // the per-step barrier
	for _, name := range a.cases {
		names += len(sets[name])
	}
	cfg.CacheCapacity = max(cfg.CacheCapacity, names)
	rt := new(hvd.Runtime)
	opts := []hvd.Option{hvd.WithConfig(cfg), hvd.WithoutMPIFinalize(),
		hvd.WithLogger(zerolog.New(os.Stderr).Level(zerolog.WarnLevel))}
	if k.chunk >= 0 {
		opts = append(opts, hvd.WithChunkBytes(k.chunk))
	}
	if k.fchunk >= 0 {
		opts = append(opts, hvd.WithFusionChunkBytes(k.fchunk))
	}
	if k.maxFused >= 0 {
		opts = append(opts, hvd.WithMaxFusedBytes(k.maxFused))
	}
	if err := rt.Init(opts...); err != nil {
		return err
	}
	own := ctl == nil
	if own {
		ctl = &rtControl{rt: rt}
	}
	for _, name := range a.cases {
		counts, ok := sets[name]
		if !ok {
			return fmt.Errorf("unknown case %q", name)
		}
		if err := runCase(rt, ctl, name, counts, k, a); err != nil {
			return err
		}
	}
	if own {
		return rt.Shutdown()
	}
	if err := rt.Shutdown(); err != nil {
		return err
	}
	if err := ctl.Barrier(); err != nil {
		return err
	}
	return nil
}

// benchCase is one case set up on a runtime: its timed step, and around
// every step (warm-up and timed alike), outside the timer, prepare and
// check; then, once after all steps, final.
type benchCase struct {
	tensors int
	bytes   float64
	step    func() error
	close   func()
	// prepare sets the step's inputs (nil: nothing to set).
	prepare func()
	// check checks every element of the step's result; it returns the
	// number of elements checked.
	check func() (int, error)
	// final, when not nil, checks what the steps left behind, across
	// ranks (it may run collectives: every rank calls it).
	final func() (int, error)
}

func runCase(rt *hvd.Runtime, ctl control, name string, counts []int, k knobs, a workerArgs) error {
	var c benchCase
	var err error
	if name == optimizerCase {
		c, err = optimizerBench(rt, ctl, name, counts)
	} else {
		c, err = allreduceBench(rt, name, counts)
	}
	if err != nil {
		return err
	}
	defer c.close()
	res, err := measure(rt, ctl, name, c, a)
	if err != nil || ctl.Rank() != 0 {
		return err
	}
	res.print(rt, ctl, name, c, k, a)
	return nil
}

// runDirect times a flat case's packed call made straight on the control
// communicator, before any runtime starts in the process: the same
// buffer, set and checked the same way around every step, one allreduce
// of it per step, from this Go process, so under the MPI settings the
// runtime's process has (the thread level mpi.Init asks for, Open MPI
// yielding while it waits). The runtime's time over this one is what the
// runtime itself adds to the call. Only beside MPI; the communicator's
// agreement check is off for the steps, as the runtime's data calls make
// none.
func runDirect(ctl control, name string, counts []int, a workerArgs) error {
	ac, ok := ctl.(comm.AgreementChecker)
	if !ok {
		return nil
	}
	flat, ts := flatViews(counts)
	rank, n := ctl.Rank(), ctl.Size()
	c := benchCase{tensors: len(counts), bytes: float64(flat.NumBytes()),
		step:    func() error { return ctl.Allreduce(flat, tensor.Sum) },
		prepare: func() { fillRanked(ts, rank) },
		check:   func() (int, error) { return verify(name, ts, sumOver(n), 0) }}
	was := ac.Check()
	ac.SetCheck(false)
	res, err := measure(nil, ctl, name, c, a)
	ac.SetCheck(was)
	if err != nil || rank != 0 {
		return err
	}
	times := slices.Sorted(slices.Values(res.times))
	fmt.Printf("impl=direct-mpi case=%s tensors=%d bytes=%.0f ranks=%d iters=%d verified=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f\n",
		name, c.tensors, c.bytes, n, a.iters, res.verified, times[len(times)/2]*1e3, times[0]*1e3, times[len(times)-1]*1e3)
	return nil
}

// flatViews returns one float32 buffer and the tensors of counts elements
// as views of it, in order, as gradients allocated with tensor.NewFlat are.
func flatViews(counts []int) (*tensor.Tensor, []*tensor.Tensor) {
	shapes := make([]tensor.Shape, len(counts))
	for i, n := range counts {
		shapes[i] = tensor.Shape{n}
	}
	return tensor.NewFlat(tensor.Float32, shapes...)
}

// allreduceBench is a case of tensors allreduced (Sum) as one group.
func allreduceBench(rt *hvd.Runtime, name string, counts []int) (benchCase, error) {
	ts := make([]*tensor.Tensor, len(counts))
	names := make([]string, len(counts))
	total := 0
	if strings.HasSuffix(name, flatSuffix) {
		_, ts = flatViews(counts)
	}
	rank, n := rt.Rank(), rt.Size()
	for i, cnt := range counts {
		if ts[i] == nil {
			ts[i] = tensor.New(tensor.Float32, cnt)
		}
		names[i] = fmt.Sprintf("%s.%d", name, i)
		total += cnt
	}
	g, err := rt.NewAllreduceGroup(ts, names, hvd.Sum)
	if err != nil {
		return benchCase{}, err
	}
	ctx := context.Background()
	step := func() error {
		h, err := g.Start()
		if err != nil {
			return err
		}
		return h.Wait(ctx)
	}
	// Each step sums in place: the inputs are set again before it.
	prepare := func() { fillRanked(ts, rank) }
	check := func() (int, error) {
		return verify(name, ts, sumOver(n), 0)
	}
	return benchCase{tensors: len(counts), bytes: float64(total * 4), step: step, prepare: prepare, check: check,
		close: func() { g.Close() }}, nil
}

// caseResult is what measure found, gathered on every rank: each timed
// step's time and the cost of its cached cycle (0 where it did not run
// from the cache alone), the slowest rank's, and rank 0's counters.
type caseResult struct {
	times, cycleCost []float64
	s0, s1           hvd.Stats
	mallocs          uint64
	verified         int
}

// statsOf returns rt's counters, or none without a runtime (runDirect).
func statsOf(rt *hvd.Runtime) hvd.Stats {
	if rt == nil {
		return hvd.Stats{}
	}
	return rt.Stats()
}

// measure times c's steps, checks the result of every step outside the
// timer (and c.final once after them), and returns the times. A rank whose
// check fails goes on stepping, so that the others do not wait on it, and
// every rank learns of the failure at the end.
//
// A step is timed as the yardstick times one: from the moment a barrier
// lines the ranks up to the end of the step. Its inputs are set before
// that barrier, so that a rank slower to set them does not start its
// peers' clocks early (the yardstick sets its buffers once, before all
// steps).
func measure(rt *hvd.Runtime, ctl control, name string, c benchCase, a workerArgs) (caseResult, error) {
	// Collect the previous cases' tensors now, not in the middle of this
	// case's timed steps (the yardstick has no collector to pay for).
	goruntime.GC()
	step := c.step
	local := tensor.New(tensor.Float64, a.iters)
	// The cost of each step's cycle when it ran from the cache alone (0
	// when it did not), read from the stats once the next barrier has
	// passed, so that the loop has recorded it.
	cycleCost := tensor.New(tensor.Float64, a.iters)
	var before, after goruntime.MemStats
	var res caseResult
	var prev hvd.Stats
	var verr error
	for it := -a.warmup; it <= a.iters; it++ {
		if it == 0 {
			goruntime.ReadMemStats(&before)
			res.s0 = statsOf(rt)
		}
		if c.prepare != nil && it < a.iters {
			c.prepare()
		}
		// Line the ranks up as the yardstick does, with a barrier of the
		// control communicator (MPI's beside the runtime; the runtime's
		// own on the embedded transport). A runtime Barrier between the
		// steps would be one more negotiated operation in every step,
		// which a training step does not have, and the static schedule
		// (GOHOROVOD_STATIC_SCHEDULE) would never see the same steps
		// repeat.
		if err := ctl.Barrier(); err != nil {
			return res, err
		}
		cur := statsOf(rt)
		if it > 0 && cur.CachedCycles-prev.CachedCycles == 1 {
			cycleCost.Float64s()[it-1] = (cur.CachedBusy - prev.CachedBusy).Seconds()
		}
		prev = cur
		if it == a.iters {
			break
		}
		t0 := time.Now()
		if err := step(); err != nil {
			return res, err
		}
		if it >= 0 {
			local.Float64s()[it] = time.Since(t0).Seconds()
		}
		if verr == nil {
			var k int
			k, verr = c.check()
			res.verified += k
			if verr != nil {
				verr = fmt.Errorf("step %d: %w", it, verr)
			}
		}
	}
	goruntime.ReadMemStats(&after)
	res.s1 = statsOf(rt)
	res.mallocs = after.Mallocs - before.Mallocs
	if c.final != nil {
		k, err := c.final()
		res.verified += k
		if verr == nil {
			verr = err
		}
	}
	if err := agreeOnFailure(ctl, name, verr); err != nil {
		return res, err
	}
	// The step time is the slowest rank's, and so is the cycle cost.
	if err := ctl.Allreduce(local, tensor.Max); err != nil {
		return res, err
	}
	if err := ctl.Allreduce(cycleCost, tensor.Max); err != nil {
		return res, err
	}
	res.times, res.cycleCost = local.Float64s(), cycleCost.Float64s()
	return res, nil
}

// print writes the case's line (rank 0).
func (res caseResult) print(rt *hvd.Runtime, ctl control, name string, c benchCase, k knobs, a workerArgs) {
	s0, s1 := res.s0, res.s1
	times := slices.Clone(res.times)
	slices.Sort(times)
	med := times[len(times)/2]
	bytes := c.bytes
	alg := bytes / med / 1e9
	n := float64(ctl.Size())
	active := s1.ActiveCycles - s0.ActiveCycles
	usPerCycle := 0.0
	if active > 0 {
		usPerCycle = float64((s1.ActiveBusy - s0.ActiveBusy).Microseconds()) / float64(active)
	}
	cached := s1.CachedCycles - s0.CachedCycles
	var costs []float64
	for _, c := range res.cycleCost {
		if c > 0 {
			costs = append(costs, c)
		}
	}
	usCached := 0.0
	if len(costs) > 0 {
		slices.Sort(costs)
		usCached = costs[len(costs)/2] * 1e6
	}
	idle := (s1.Cycles - s0.Cycles) - active
	idleUs := 0.0
	if idle > 0 {
		idleUs = float64((s1.IdleBusy - s0.IdleBusy).Microseconds()) / float64(idle)
	}
	transport := "embedded"
	if rt.MPIEnabled() {
		transport = "mpi"
	}
	fmt.Printf("impl=runtime transport=%s case=%s tensors=%d bytes=%.0f ranks=%d iters=%d fusion=%d chunk=%d fchunk=%d maxfused=%d hierarchical=%v nodes=%d verified=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f algbw_GBps=%.3f busbw_GBps=%.3f "+
		"us_per_cached_cycle=%.1f cached_cycles_per_step=%.2f us_per_active_cycle=%.1f active_cycles_per_step=%.2f us_per_idle_cycle=%.1f slow_cycles=%d whole_per_step=%.2f static_units_per_step=%.2f allocs_per_step=%.1f\n",
		transport, name, c.tensors, bytes, ctl.Size(), a.iters, k.thr, k.chunk, k.fchunk, k.maxFused, a.hierarchical, len(rt.Nodes()), res.verified, med*1e3, times[0]*1e3, times[len(times)-1]*1e3, alg, alg*2*(n-1)/n,
		usCached, float64(cached)/float64(a.iters), usPerCycle, float64(active)/float64(a.iters), idleUs, s1.SlowCycles-s0.SlowCycles,
		float64(s1.FusedWhole-s0.FusedWhole)/float64(a.iters), float64(s1.StaticUnits-s0.StaticUnits)/float64(a.iters),
		float64(res.mallocs)/float64(a.iters))
}

// agreeOnFailure tells every rank whether any rank's check failed (verr
// on this one), so that none waits on the others, and returns the failure
// as this rank saw it.
func agreeOnFailure(ctl control, name string, verr error) error {
	bad := tensor.New(tensor.Float64, 1)
	if verr != nil {
		bad.Float64s()[0] = 1
	}
	if err := ctl.Allreduce(bad, tensor.Max); err != nil {
		return err
	}
	if verr != nil {
		return fmt.Errorf("rank %d: %w", ctl.Rank(), verr)
	}
	if bad.Float64s()[0] != 0 {
		return fmt.Errorf("case %s: the check failed on another rank", name)
	}
	return nil
}
