//go:build (mpi && cgo) || gloo

package runtime

import (
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

// nodesRuntime starts a Runtime over the job's world with the hierarchical
// knobs as given and, under MPI, the node names of HOROVOD_HOSTNAME (which
// WithConfig would otherwise drop); static parity sets when sets is set.
func nodesRuntime(t *testing.T, hierarchical, sets bool, extra ...Option) (*Runtime, *ProcessSet) {
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
	if err := r.Init(append(opts, extra...)...); err != nil {
		t.Fatal(err)
	}
	return r, even
}

// TestMPINodesHierarchical runs the same collectives flat and hierarchical
// (every op, integer and float dtypes, odd lengths, fused, chunked, uneven
// allgathers) and compares each rank's results: integers bit for bit,
// floats within 1e-6, and that the hierarchical run did run every
// allreduce and allgather hierarchically (Stats). It means that only where
// the job spans several nodes: scripts/mpitest.sh runs it on 2x2 and 3x2
// layouts of this one machine (mpirun with HOROVOD_HOSTNAME per rank,
// gohorovodrun --gloo with -H a.localhost:2,b.localhost:2). On one node it
// checks that the knobs are ignored, with rank 0's log line, and that the
// collectives still work.
func TestMPINodesHierarchical(t *testing.T) {
	for _, sets := range []bool{false, true} {
		flatRT, even := nodesRuntime(t, false, sets)
		if flatRT.LocalSize() == flatRT.Size() {
			flatRT.Shutdown()
			world.Barrier()
			hierIgnoredOnOneNode(t)
			return
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
		if hierRT.loop.p.hier == nil {
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
			if st := hierRT.Stats(); st.HierarchicalAllreduces == 0 || st.HierarchicalAllgathers == 0 {
				t.Fatalf("sets %v: %d hierarchical allreduces and %d allgathers on %d nodes", sets,
					st.HierarchicalAllreduces, st.HierarchicalAllgathers, hierRT.CrossSize())
			}
		}
		if st := flatRT.Stats(); st.HierarchicalAllreduces != 0 || st.HierarchicalAllgathers != 0 {
			t.Fatalf("sets %v: the flat run counted hierarchical collectives: %+v", sets, st)
		}
		if err := hierRT.Barrier(mpiCtx(t)); err != nil {
			t.Fatal(err)
		}
		hierRT.Shutdown()
		world.Barrier()
	}
}

// hierIgnoredOnOneNode: with the hierarchical knobs on and every rank on
// one node, rank 0 logs that they are ignored, and the collectives run
// flat and right.
func hierIgnoredOnOneNode(t *testing.T) {
	sink := new(logSink)
	r, _ := nodesRuntime(t, true, false, WithLogger(zerolog.New(sink).Level(zerolog.InfoLevel)))
	defer func() {
		r.Shutdown()
		world.Barrier()
	}()
	if r.loop.p.hier != nil {
		t.Fatal("hierarchical collectives are on with one node")
	}
	s, err := r.Allreduce(mpiCtx(t), tensor.FromInt64([]int64{int64(r.Rank())}), "one.node", Sum)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(r.Size() * (r.Size() - 1) / 2); s.Int64s()[0] != want {
		t.Fatalf("sum %d, want %d", s.Int64s()[0], want)
	}
	g, err := r.Allgather(mpiCtx(t), tensor.FromInt64([]int64{int64(r.Rank())}, 1), "one.node.ag")
	if err != nil || g.Len() != r.Size() {
		t.Fatalf("allgather: %v %v", g, err)
	}
	if err := r.Barrier(mpiCtx(t)); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.HierarchicalAllreduces != 0 || st.HierarchicalAllgathers != 0 {
		t.Fatalf("one node counted hierarchical collectives: %+v", st)
	}
	const line = "hierarchical allreduce and allgather are ignored: every rank of the process set is on one node"
	if got := strings.Contains(sink.String(), line); got != (r.Rank() == 0) {
		t.Fatalf("rank %d: the ignored line logged: %v, want it on rank 0 only:\n%s", r.Rank(), got, sink.String())
	}
}
