package main

import (
	"context"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strconv"
	"time"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// mainStarted is when the program started (package initialisation, just
// before main): the first of the start-up times that -rank-report prints.
var mainStarted = time.Now()

// clock holds the start-up times that main sees around hvd.Init; zero
// where the runtime was initialised by someone else (the tests).
type clock struct {
	started, initStart, initEnd time.Time
}

// probeTimes are the medians, in milliseconds, of the -miss-steps steps
// that add one small allreduce: under a name every rank has used before
// (its negotiation cached) and under a fresh name each time (a miss).
type probeTimes struct {
	cached, miss float64
}

// probe times n steps with a cached probe allreduce and n with a fresh
// name each, after one untimed step that puts the cached name in the
// cache. The probe follows the step's own reductions, so a miss step
// differs from a cached one only in the negotiation of the new name.
func (b *bench) probe(ctx context.Context, r *hvd.Runtime, n int) (p probeTimes, err error) {
	if n == 0 {
		return p, nil
	}
	x := tensor.New(tensor.Float32, 16)
	one := func(name string) (float64, error) {
		s := time.Now()
		if _, _, err := b.step(ctx); err != nil {
			return 0, err
		}
		if err := r.AllreduceInPlace(ctx, x, name, hvd.Sum); err != nil {
			return 0, err
		}
		return msSince(s), nil
	}
	if _, err := one("synthetic.probe"); err != nil {
		return p, err
	}
	var cached, miss []float64
	for i := range 2 * n {
		name := "synthetic.probe"
		if i%2 == 1 {
			name = fmt.Sprintf("synthetic.probe.%d", i/2)
		}
		ms, err := one(name)
		if err != nil {
			return p, err
		}
		if i%2 == 1 {
			miss = append(miss, ms)
		} else {
			cached = append(cached, ms)
		}
	}
	return probeTimes{cached: median(cached), miss: median(miss)}, nil
}

// hold keeps the ranks stepping, after rank 0 has printed "hold=begin",
// until the file o.holdFile exists or o.holdMax has passed (rank 0 decides
// and tells the others in a one-element allreduce each step), so that an
// observer (cmd/rankbench) can sample the processes in a steady state of
// known extent. It returns the steps taken.
func (b *bench) hold(ctx context.Context, r *hvd.Runtime, o options, out io.Writer) (int, error) {
	if o.holdFile == "" {
		return 0, nil
	}
	if r.Rank() == 0 {
		fmt.Fprintln(out, "hold=begin")
	}
	stop := tensor.New(tensor.Int32, 1)
	deadline := time.Now().Add(o.holdMax)
	for steps := 0; ; steps++ {
		stop.Int32s()[0] = 0
		if r.Rank() == 0 {
			if _, err := os.Stat(o.holdFile); err == nil || time.Now().After(deadline) {
				stop.Int32s()[0] = 1
			}
		}
		if err := r.AllreduceInPlace(ctx, stop, "synthetic.hold", hvd.Max); err != nil {
			return steps, err
		}
		if stop.Int32s()[0] != 0 {
			return steps, nil
		}
		if _, _, err := b.step(ctx); err != nil {
			return steps, err
		}
	}
}

// rankFields are the figures -rank-report gathers from every rank, in
// this order: its pid, the start-up times in unix microseconds (exact in
// a float64), the goroutines it runs after the hold, and the CPU
// milliseconds of its timed steps.
var rankFields = []string{"pid", "main_unix_us", "init_start_unix_us", "init_end_unix_us", "first_step_unix_us", "goroutines", "cpu_ms_timed"}

// rankReport gathers every rank's rankFields to rank 0, which prints, with
// -rank-report, them as rank.R.FIELD=V lines and the mean CPU per timed
// step and rank (cpu_ms_per_step_per_rank), and, with -miss-steps, the
// probe's medians averaged over the ranks. It does nothing without either.
func (b *bench) rankReport(ctx context.Context, r *hvd.Runtime, o options, t timing, p probeTimes, out io.Writer) error {
	if !o.rankReport && o.missSteps == 0 {
		return nil
	}
	size, k := r.Size(), len(rankFields)
	us := func(tm time.Time) float64 {
		if tm.IsZero() {
			return 0
		}
		return float64(tm.UnixMicro())
	}
	v := make([]float64, size*k+2)
	copy(v[r.Rank()*k:], []float64{float64(os.Getpid()), us(o.clock.started), us(o.clock.initStart), us(o.clock.initEnd),
		us(b.firstStep), float64(goruntime.NumGoroutine()), 1000 * t.cpu})
	v[size*k], v[size*k+1] = p.cached/float64(size), p.miss/float64(size)
	x := tensor.FromFloat64(v)
	if err := r.AllreduceInPlace(ctx, x, "synthetic.ranks", hvd.Sum); err != nil {
		return err
	}
	if r.Rank() != 0 {
		return nil
	}
	v = x.Float64s()
	if o.rankReport {
		cpu := 0.0
		for rank := range size {
			for j, f := range rankFields {
				fmt.Fprintf(out, "rank.%d.%s=%s\n", rank, f, strconv.FormatFloat(v[rank*k+j], 'f', -1, 64))
			}
			cpu += v[rank*k+k-1]
		}
		steps := float64(o.batches * o.iterations)
		fmt.Fprintf(out, "cpu_ms_per_step_per_rank=%.6g\n", cpu/steps/float64(size))
	}
	if o.missSteps > 0 {
		fmt.Fprintf(out, "probe_cached_step_ms=%.6g\nprobe_miss_step_ms=%.6g\n", v[size*k], v[size*k+1])
	}
	return nil
}
