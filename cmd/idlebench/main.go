package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/internal/cputime"
	"github.com/gohorovod/gohorovod/internal/scaling"
	"github.com/gohorovod/gohorovod/mpi"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// variants are what each round measures, in a rotated order.
var variants = []string{"raw-mpi", "runtime static=0", "runtime static=3"}

// kinds[v] is what variant v runs: 0 raw MPI, 1 the runtime with the
// static schedule off, 2 with it on.
var kinds = []int{0, 1, 2}

func main() {
	rounds := flag.Int("rounds", 5, "rounds; each runs every variant once, in a rotated order")
	steps := flag.Int("steps", 50, "timed steps per variant and round")
	pause := flag.Duration("pause", 20*time.Millisecond, "pause before each step (the compute the runtime waits for)")
	elems := flag.Int("elements", 1024, "float32 elements of the tensor allreduced each step")
	only := flag.String("only", "", "measure only the variant of this name (with -cpuprofile, to profile one)")
	profile := flag.String("cpuprofile", "", "write rank 0's CPU profile of the whole run here")
	flag.Parse()
	if *only != "" {
		i := slices.Index(variants, *only)
		if i < 0 {
			fmt.Fprintf(os.Stderr, "idlebench: -only %q: want one of %q\n", *only, variants)
			os.Exit(2)
		}
		variants = []string{variants[i]}
		kinds = []int{i}
	}
	if *profile != "" {
		stop, err := startProfile(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "idlebench:", err)
			os.Exit(1)
		}
		defer stop()
	}
	if err := run(*rounds, *steps, *pause, *elems); err != nil {
		fmt.Fprintln(os.Stderr, "idlebench:", err)
		os.Exit(1)
	}
}

func run(rounds, steps int, pause time.Duration, elems int) error {
	if !mpi.Built {
		return errors.New("built without MPI: go build -tags mpi")
	}
	if err := mpi.Init(); err != nil {
		return err
	}
	defer mpi.Finalize()
	world, err := mpi.World()
	if err != nil {
		return err
	}
	shares := make([][]float64, len(variants)) // rank-mean CPU share per round
	for r := range rounds {
		for _, v := range scaling.Order(len(variants), r) {
			share, err := measure(world, kinds[v], steps, pause, elems)
			if err != nil {
				return fmt.Errorf("%s: %w", variants[v], err)
			}
			// The ranks' mean share.
			t := tensor.FromFloat64([]float64{share})
			if err := world.Allreduce(t, tensor.Sum); err != nil {
				return err
			}
			shares[v] = append(shares[v], t.Float64s()[0]/float64(world.Size()))
		}
	}
	if world.Rank() != 0 {
		return nil
	}
	raw := 0.0
	if kinds[0] == 0 {
		raw = scaling.Median(shares[0])
	}
	fmt.Printf("idlebench: np %d, %d rounds of %d steps, %v pause, %d float32 each step; CPU per second of wall time, mean over ranks, median over rounds\n",
		world.Size(), rounds, steps, pause, elems)
	for v, name := range variants {
		med := scaling.Median(shares[v])
		if raw == 0 {
			fmt.Printf("impl=%s cpu_share=%.4f rounds=%v\n", name, med, rounded(shares[v]))
			continue
		}
		fmt.Printf("impl=%s cpu_share=%.4f ratio_to_raw=%.2f rounds=%v\n", name, med, med/raw, rounded(shares[v]))
	}
	return nil
}

func rounded(xs []float64) []string {
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprintf("%.4f", x))
	}
	return out
}

// startProfile starts a CPU profile into path on rank 0 (the rank is
// known from the launcher's variables before MPI starts) and returns what
// stops it.
func startProfile(path string) (func() error, error) {
	if r := os.Getenv("OMPI_COMM_WORLD_RANK"); r != "" && r != "0" {
		return func() error { return nil }, nil
	}
	return cputime.Profile(path)
}

// measure runs kind v's warm-up and timed steps and returns this rank's
// CPU seconds per wall second over the timed ones.
func measure(world *mpi.Comm, v, steps int, pause time.Duration, elems int) (float64, error) {
	w := tensor.New(tensor.Float32, elems)
	ctx := context.Background()
	var step func() error
	var stop func() error
	if v == 0 {
		step = func() error { return world.Allreduce(w, tensor.Sum) }
		stop = func() error { return nil }
	} else {
		cfg, err := config.FromEnv(os.LookupEnv)
		if err != nil {
			return 0, err
		}
		cfg.StaticSchedule = 0
		if v == 2 {
			cfg.StaticSchedule = config.DefaultStaticSchedule
		}
		r := new(hvd.Runtime)
		if err := r.Init(hvd.WithConfig(cfg), hvd.WithoutMPIFinalize(), hvd.WithLogger(zerolog.New(os.Stderr).Level(zerolog.WarnLevel))); err != nil {
			return 0, err
		}
		step = func() error { return r.AllreduceInPlace(ctx, w, "idlebench.w", hvd.Sum) }
		stop = r.Shutdown
	}
	// Warm-up: the runtime negotiates the name, caches it and, with the
	// static schedule on, locks it.
	for range 10 {
		if err := step(); err != nil {
			return 0, err
		}
	}
	if err := world.Barrier(); err != nil {
		return 0, err
	}
	c0, ok := cputime.Seconds()
	if !ok {
		return 0, errors.New("no process CPU time on this system")
	}
	t0 := time.Now()
	for range steps {
		time.Sleep(pause)
		if err := step(); err != nil {
			return 0, err
		}
	}
	c1, _ := cputime.Seconds()
	share := (c1 - c0) / time.Since(t0).Seconds()
	if err := stop(); err != nil {
		return 0, err
	}
	return share, world.Barrier()
}
