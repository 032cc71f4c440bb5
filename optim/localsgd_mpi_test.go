//go:build (mpi && cgo) || gloo

// Post-local SGD and model averaging as several processes, over the
// runtime of runtime_mpi_test.go (mpiRT). scripts/mpitest.sh runs them at
// np 2, 3 and 4, and TestMPILocalSGDHierarchical also on the node layouts
// 2x2 and 3x2 (HOROVOD_HOSTNAME under mpirun, -H under gohorovodrun
// --gloo), where each node has its own averaging.

package optim

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// spread returns the largest difference, element by element, between the
// ranks of ps (nil: every rank) in x.
func spread(ctx context.Context, ps *hvd.ProcessSet, x []float64, name string) (float64, error) {
	var opts []hvd.CallOption
	if ps != nil {
		opts = append(opts, hvd.InProcessSet(ps))
	}
	hi, err := mpiRT.Allreduce(ctx, tensor.FromFloat64(slices.Clone(x)), name+".max", hvd.Max, opts...)
	if err != nil {
		return 0, err
	}
	lo, err := mpiRT.Allreduce(ctx, tensor.FromFloat64(slices.Clone(x)), name+".min", hvd.Min, opts...)
	if err != nil {
		return 0, err
	}
	return maxDiff(hi.Float64s(), lo.Float64s()), nil
}

// TestMPILocalSGDPeriodOne: post-local SGD averaging after every step ends
// where synchronous SGD on the whole batch does (see
// TestPostLocalSGDPeriodOneIsSynchronous).
func TestMPILocalSGDPeriodOne(t *testing.T) {
	const steps = 20
	want := singleLinear(t, steps, localSGDLinear)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := localRun(ctx, mpiRT, mpiRT.Rank(), mpiRT.Size(), steps, localSGDLinear,
		LocalSGDConfig{StartLocalSGDIter: 3, ModelAveragingPeriod: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := closeTo(got[steps-1], want, 1e-12); err != nil {
		t.Fatalf("rank %d of %d: %v", mpiRT.Rank(), mpiRT.Size(), err)
	}
}

// TestMPILocalSGDReplicas: the replicas agree after the synchronous steps
// and right after each averaging, and differ in between.
func TestMPILocalSGDReplicas(t *testing.T) {
	const start, period, steps = 3, 4, 12
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := localRun(ctx, mpiRT, mpiRT.Rank(), mpiRT.Size(), steps, localSGDLinear,
		LocalSGDConfig{StartLocalSGDIter: start, ModelAveragingPeriod: period},
		func(step int, o *PostLocalSGD, params []float64) error {
			d, err := spread(ctx, nil, params, "replicas")
			if err != nil {
				return err
			}
			same := step <= start || (step-start)%period == 0
			if same != o.Averaged() {
				return fmt.Errorf("Averaged %v", o.Averaged())
			}
			if same && d != 0 || !same && d < 1e-9 {
				return fmt.Errorf("replicas differ by %g (expected them to agree: %v)", d, same)
			}
			return nil
		})
	if err != nil {
		t.Fatalf("rank %d: %v", mpiRT.Rank(), err)
	}
}

// TestMPILocalSGDHierarchical: averaging within each node every k1 steps
// and across every rank every k2: the replicas of a node agree right
// after a node averaging, every replica right after a global one; across
// nodes they differ in between. On one node the node is every rank.
func TestMPILocalSGDHierarchical(t *testing.T) {
	const start, k1, k2, steps = 2, 2, 6, 14
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node, err := mpiRT.AddNodeProcessSets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodeColl, err := FromProcessSet(mpiRT, node)
	if err != nil {
		t.Fatal(err)
	}
	nodes := len(mpiRT.Nodes())
	t.Logf("rank %d: nodes %v", mpiRT.Rank(), mpiRT.Nodes())
	cfg := LocalSGDConfig{StartLocalSGDIter: start, ModelAveragingPeriod: k2, Hierarchy: []AveragingLevel{{Period: k1, Coll: nodeColl}}}
	_, err = localRun(ctx, mpiRT, mpiRT.Rank(), mpiRT.Size(), steps, localSGDLinear, cfg,
		func(step int, o *PostLocalSGD, params []float64) error {
			inNode, err := spread(ctx, node, params, "node")
			if err != nil {
				return err
			}
			all, err := spread(ctx, nil, params, "all")
			if err != nil {
				return err
			}
			k := step - start
			nodeSame := step <= start || k%k1 == 0
			allSame := step <= start || k%k2 == 0 || (nodes == 1 && nodeSame)
			switch {
			case nodeSame && inNode != 0:
				return fmt.Errorf("the replicas of node %v differ by %g", node.Ranks(), inNode)
			case allSame && all != 0:
				return fmt.Errorf("the replicas differ by %g", all)
			case !allSame && all < 1e-9:
				return fmt.Errorf("the replicas agree (%g) across %d nodes between global averagings", all, nodes)
			case !nodeSame && node.Size() > 1 && inNode < 1e-9:
				return fmt.Errorf("the replicas of node %v agree (%g) between averagings", node.Ranks(), inNode)
			}
			return nil
		})
	if err != nil {
		t.Fatalf("rank %d (node %v of %d nodes): %v", mpiRT.Rank(), node.Ranks(), nodes, err)
	}
}
