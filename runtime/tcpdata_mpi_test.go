//go:build mpi && cgo

package runtime

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/transport"
	"github.com/gohorovod/gohorovod/tensor"
)

// hostDataRuntime starts a runtime under MPI with HOROVOD_CPU_OPERATIONS
// set to cpuOps and reports whether its host collectives run on the TCP
// ring.
func hostDataRuntime(t *testing.T, cpuOps string, hierarchical bool, extra ...Option) (*Runtime, bool) {
	t.Helper()
	cfg := testConfig()
	cfg.CPUOperations, cfg.Hostname = cpuOps, os.Getenv(config.EnvHostname)
	cfg.HierarchicalAllreduce, cfg.HierarchicalAllgather = hierarchical, hierarchical
	r := new(Runtime)
	opts := append([]Option{WithConfig(cfg), WithoutMPIFinalize(), WithLogger(zerolog.Nop())}, extra...)
	if err := r.Init(opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Shutdown()
		world.Barrier()
	})
	r.mu.Lock()
	ring := transport.IsHostData(r.com)
	r.mu.Unlock()
	return r, ring
}

// TestMPINodesHostData runs the host collectives on the TCP ring beside
// MPI (HOROVOD_CPU_OPERATIONS=gloo), on one node and, in scripts/mpitest.sh's
// node layouts, across emulated nodes: fused allreduces, every other
// collective, a process set and the hierarchical allreduce give MPI's
// results. HOROVOD_CPU_OPERATIONS=mpi keeps MPI; unset, a job on one node
// stays on MPI and one across nodes measures (either outcome is right;
// both must work).
func TestMPINodesHostData(t *testing.T) {
	skipEmbedded(t, "the TCP ring beside MPI")
	t.Run("gloo", func(t *testing.T) {
		opts, even, odd := staticParitySets(world.Size())
		r, ring := hostDataRuntime(t, config.ControllerGloo, false, opts...)
		if !ring {
			t.Fatal("HOROVOD_CPU_OPERATIONS=gloo: the host collectives are not on the TCP ring")
		}
		checkHostData(t, r)
		if err := scenarioDisjointSets(r, even, odd); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("gloo-hierarchical", func(t *testing.T) {
		r, ring := hostDataRuntime(t, config.ControllerGloo, true)
		if !ring {
			t.Fatal("HOROVOD_CPU_OPERATIONS=gloo: the host collectives are not on the TCP ring")
		}
		if multi := countNodes(r.nodes) > 1; multi != (r.loop.p.hier != nil) {
			t.Fatalf("%d nodes, hierarchical collectives on: %v", countNodes(r.nodes), r.loop.p.hier != nil)
		}
		checkHostData(t, r)
	})
	t.Run("gloo-one-rank-cannot-listen", func(t *testing.T) {
		cfg := testConfig()
		cfg.CPUOperations = config.ControllerGloo
		if world.Rank() == world.Size()-1 {
			cfg.GlooIface = "gohorovod-no-such-interface"
		}
		r := new(Runtime)
		err := r.Init(WithConfig(cfg), WithoutMPIFinalize(), WithLogger(zerolog.Nop()))
		world.Barrier()
		if err == nil {
			r.Shutdown()
			world.Barrier()
			t.Fatal("Init succeeded with a ring that could not open on one rank")
		}
		want := fmt.Sprintf("rank %d could not", world.Size()-1)
		if world.Rank() == world.Size()-1 {
			want = "gohorovod-no-such-interface"
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), config.EnvCPUOperations) {
			t.Fatalf("Init: %v; want it to name %q and %s", err, want, config.EnvCPUOperations)
		}
	})
	t.Run("mpi", func(t *testing.T) {
		r, ring := hostDataRuntime(t, config.ControllerMPI, false)
		if ring {
			t.Fatal("HOROVOD_CPU_OPERATIONS=mpi: the host collectives left MPI")
		}
		checkHostData(t, r)
	})
	t.Run("measured", func(t *testing.T) {
		r, ring := hostDataRuntime(t, "", false)
		if ring && countNodes(r.nodes) < 2 {
			t.Fatal("a job on one node moved its host collectives off MPI")
		}
		checkHostData(t, r)
	})
}

// checkHostData checks fused allreduces and every other collective on r.
func checkHostData(t *testing.T, r *Runtime) {
	t.Helper()
	rank, size := r.Rank(), r.Size()
	for round := 0; round < 2; round++ { // the second from the response cache
		ts := make([]*tensor.Tensor, 12)
		for i := range ts {
			ts[i] = fill(tensor.Float32, 1000+i, float64(rank+i))
		}
		outs, err := r.GroupedAllreduce(mpiCtx(t), ts, "hostdata", Sum)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			want := float32(size*(size-1)/2 + size*i)
			if got := o.Float32s()[999+i]; got != want {
				t.Fatalf("round %d tensor %d: %v, want %v", round, i, got, want)
			}
		}
	}
	checkCollectives(t, r)
}
