//go:build (mpi && cgo) || gloo

// Decentralized SGD as several processes, over the runtime of
// runtime_mpi_test.go (mpiRT), checked step by step against the
// single-process reference of decentralized_test.go. scripts/mpitest.sh
// runs them at np 2, 3 and 4 (shift_one is refused at 3), and
// TestMPIDecentralizedHierarchical also on the node layouts 2x2 and 3x2.

package optim

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestMPIDecentralized(t *testing.T) {
	const steps = 12
	n, rank := mpiRT.Size(), mpiRT.Rank()
	coll := jobColl(t)
	for _, mode := range []PeerSelection{PeerAll, PeerShiftOne} {
		for _, k := range []int{1, 2} {
			t.Run(fmt.Sprintf("%v/interval%d", mode, k), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				got, err := decentralizedRun(ctx, coll, rank, n, steps, DecentralizedConfig{PeerSelection: mode, CommunicationInterval: k})
				syncRanks(ctx, t)
				if mode == PeerShiftOne && n%2 != 0 {
					if !errors.Is(err, ErrDecentralized) {
						t.Fatalf("rank %d of %d: shift_one at an odd size: %v, want ErrDecentralized", rank, n, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("rank %d: %v", rank, err)
				}
				want := decentralizedReference(n, steps, k, mode, nil)
				if err := checkAgainst(got, want[rank]); err != nil {
					t.Fatalf("rank %d of %d: %v", rank, n, err)
				}
			})
		}
	}
}

func TestMPIDecentralizedHierarchical(t *testing.T) {
	const steps = 8
	n, rank := mpiRT.Size(), mpiRT.Rank()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := NewHierarchy(ctx, mpiRT)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // the leaders' set, which the other tests must not meet
		if err := h.Close(ctx); err != nil {
			t.Errorf("rank %d: closing the hierarchy: %v", rank, err)
		}
	}()
	nodeOf := make([]int, n)
	for k, node := range mpiRT.Nodes() {
		for _, r := range node {
			nodeOf[r] = k
		}
	}
	coll := jobColl(t)
	for _, mode := range []PeerSelection{PeerAll, PeerShiftOne} {
		t.Run(mode.String(), func(t *testing.T) {
			got, err := decentralizedRun(ctx, coll, rank, n, steps, DecentralizedConfig{PeerSelection: mode, CommunicationInterval: 1, Hierarchy: h})
			syncRanks(ctx, t)
			if mode == PeerShiftOne && h.Nodes%2 != 0 {
				if !errors.Is(err, ErrDecentralized) {
					t.Fatalf("rank %d: shift_one over %d nodes: %v, want ErrDecentralized", rank, h.Nodes, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("rank %d: %v", rank, err)
			}
			if err := checkAgainst(got, decentralizedReference(n, steps, 1, mode, nodeOf)[rank]); err != nil {
				t.Fatalf("rank %d (nodes %v): %v", rank, mpiRT.Nodes(), err)
			}
		})
	}
}

// syncRanks waits for every rank: a rank that finishes a run first must
// not shut the job down while another still broadcasts within its node.
func syncRanks(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := mpiRT.Barrier(ctx); err != nil {
		t.Fatalf("rank %d: barrier: %v", mpiRT.Rank(), err)
	}
}
