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
