//go:build (mpi && cgo) || gloo

package runtime

import (
	"os"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// nodesRuntime starts a Runtime over the job's world with the hierarchical
// knobs as given and, under MPI, the node names of HOROVOD_HOSTNAME (which
// WithConfig would otherwise drop); static parity sets when sets is set.
func nodesRuntime(t *testing.T, hierarchical, sets bool) (*Runtime, *ProcessSet) {
	t.Helper()
	cfg := testConfig()
	cfg.Hostname = os.Getenv(config.EnvHostname)
	cfg.HierarchicalAllreduce, cfg.HierarchicalAllgather = hierarchical, hierarchical
	cfg.FusionThreshold = 1 << 16
	opts := append([]Option{WithConfig(cfg), WithoutMPIFinalize(), WithLogger(zerolog.Nop())}, worldOpts(t)...)
	var even *ProcessSet
	if sets {
		var o []Option
		o, even, _ = staticParitySets(world.Size())
		opts = append(opts, o...)
	}
	r := new(Runtime)
	if err := r.Init(opts...); err != nil {
		t.Fatal(err)
	}
	return r, even
}

// TestMPINodesHierarchical runs the same collectives flat and hierarchical
// (every op, integer and float dtypes, odd lengths, fused, chunked, uneven
// allgathers) and compares each rank's results: integers bit for bit,
// floats within 1e-6. It means something only where the job spans several
// nodes: scripts/mpitest.sh runs it on 2x2 and 3x2 layouts of this one
// machine (mpirun with HOROVOD_HOSTNAME per rank, gohorovodrun --gloo with
// -H a.localhost:2,b.localhost:2); it skips on one node.
func TestMPINodesHierarchical(t *testing.T) {
	for _, sets := range []bool{false, true} {
		flatRT, even := nodesRuntime(t, false, sets)
		if flatRT.LocalSize() == flatRT.Size() {
			flatRT.Shutdown()
			world.Barrier()
			t.Skip("one node: run it as scripts/mpitest.sh's node layouts do")
		}
		var opts []CallOption
		member := true
		if sets {
			opts, member = []CallOption{InProcessSet(even)}, even.Included()
		}
		var flat []*tensor.Tensor
		if member {
			res, err := hierWorkload(flatRT, flatRT.Rank(), opts)
			if err != nil {
				t.Fatal(err)
			}
			flat = res
		}
		if err := flatRT.Barrier(mpiCtx(t)); err != nil { // the set's members are done
			t.Fatal(err)
		}
		flatRT.Shutdown()
		world.Barrier()
		hierRT, even := nodesRuntime(t, true, sets)
		if hierRT.loop.hier == nil {
			t.Fatalf("hierarchical collectives are off on %d nodes", hierRT.CrossSize())
		}
		if sets {
			opts = []CallOption{InProcessSet(even)}
		}
		if member {
			res, err := hierWorkload(hierRT, hierRT.Rank(), opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameResults([][]*tensor.Tensor{flat}, [][]*tensor.Tensor{res}); err != nil {
				t.Fatalf("sets %v: %v", sets, err)
			}
		}
		if err := hierRT.Barrier(mpiCtx(t)); err != nil {
			t.Fatal(err)
		}
		hierRT.Shutdown()
		world.Barrier()
	}
}
