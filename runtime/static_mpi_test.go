//go:build (mpi && cgo) || gloo

package runtime

import (
	"fmt"
	"testing"

	"github.com/rs/zerolog"
)

// TestMPIStaticSchedule runs the static schedule's scenarios
// (static_scenarios_test.go) across processes: over MPI under mpirun, and
// over the embedded transport under gohorovodrun --gloo. Every rank must
// see the right sums, Horovod's mismatch error, or the stall inspector's
// shutdown, as the scenario says; a hang fails the test at its deadline.
func TestMPIStaticSchedule(t *testing.T) {
	cases := []struct {
		async bool
		div   divergence
	}{
		{true, divNone}, {false, divNone}, {true, divRename}, {true, divSkip}, {false, divReorder},
		{true, divReorder}, {true, divReshape}, {false, divSlow}, {true, divJoin}, {false, divJoin}, {true, divShutdown},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("async=%v/%v", c.async, c.div), func(t *testing.T) {
			r := new(Runtime)
			opts := append([]Option{WithConfig(staticConfig()), WithoutMPIFinalize(), WithLogger(zerolog.Nop())}, worldOpts(t)...)
			if err := r.Init(opts...); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				r.Shutdown()
				world.Barrier()
			})
			if err := staticScenario(mpiCtx(t), r, c.async, c.div); err != nil {
				t.Fatalf("rank %d: %v", r.Rank(), err)
			}
		})
	}
}

// TestMPIStaticRun: across processes (MPI under mpirun, the embedded
// transport under gohorovodrun --gloo), a group whose tensors are one flat
// buffer on every rank is reduced in one call a step once the schedule
// locks (Stats.StaticRuns), with the right sums. Where the last rank's
// tensors are separate allocations, from the start or from a new group of
// the same names halfway (the schedule stays locked: same names, same
// shapes), no rank reduces a run from then on, and the sums stay right.
func TestMPIStaticRun(t *testing.T) {
	sizes := []int{1000, 30000, 7, 2048} // one above the 64 KiB MaxFused
	cases := []struct {
		name           string
		separate       bool // the last rank's tensors, from the start
		switchHalfway  bool // the last rank's tensors, from the second half
		wantRunsSecond bool // runs in the second half
	}{
		{"flat everywhere", false, false, true},
		{"last rank separate", true, false, false},
		{"last rank separate from halfway", false, true, false},
	}
	const half = 10
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := append([]Option{WithConfig(staticConfig()), WithLogger(zerolog.Nop())}, worldOpts(t)...)
			r := new(Runtime)
			if err := r.Init(opts...); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				r.Shutdown()
				world.Barrier()
			})
			rank, n := r.Rank(), r.Size()
			last := rank == n-1 && n > 1
			names := make([]string, len(sizes))
			for i := range names {
				names[i] = fmt.Sprintf("mpirun.%d", i)
			}
			in := func(i, j int) float32 { return float32(100*(rank+1) + 10*i + j%100) }
			want := func(i, j int) float32 { return float32(100*n*(n+1)/2 + n*(10*i+j%100)) }
			var firstHalf int64
			for phase := range 2 {
				separate := last && (c.separate || (c.switchHalfway && phase == 1))
				ts := float32Tensors(sizes, !separate)
				g, err := r.NewAllreduceGroup(ts, names, Sum)
				if err != nil {
					t.Fatal(err)
				}
				before := r.Stats().StaticRuns
				for step := range half {
					if err := groupStep(mpiCtx(t), g, ts, phase*half+step, in, want); err != nil {
						t.Fatalf("rank %d: %v", rank, err)
					}
				}
				g.Close()
				runs := r.Stats().StaticRuns - before
				if phase == 0 {
					firstHalf = runs
				}
				if phase == 1 && c.wantRunsSecond && runs != half {
					t.Errorf("rank %d: %d runs in the second %d steps, want one a step", rank, runs, half)
				}
				if phase == 1 && !c.wantRunsSecond && runs != 0 {
					t.Errorf("rank %d: %d runs in the second %d steps, where the last rank's tensors are separate", rank, runs, half)
				}
			}
			if s := r.Stats(); s.StaticLocks == 0 {
				t.Errorf("rank %d: the schedule never locked: %+v", rank, s)
			}
			if c.separate && firstHalf != 0 && n > 1 {
				t.Errorf("rank %d: %d runs in the first half, where the last rank's tensors are separate", rank, firstHalf)
			}
		})
	}
}
