package runtime

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// TestNodes: Nodes groups the ranks as the transport places them, in the
// order of each node's lowest rank, on every rank alike, and
// AddNodeProcessSets gives each rank the set of its node, whose allreduce
// stays within the node; on one node it is the global set.
func TestNodes(t *testing.T) {
	for _, tt := range []struct {
		name   string
		nodeOf []int
		want   [][]int
	}{
		{"2x2 alternating", []int{0, 1, 0, 1}, [][]int{{0, 2}, {1, 3}}},
		{"3+1", []int{4, 4, 7, 4}, [][]int{{0, 1, 3}, {2}}},
		{"one node", []int{0, 0, 0}, [][]int{{0, 1, 2}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			group := memcomm.NewGroupWith(len(tt.nodeOf), memcomm.GroupOptions{NodeOf: tt.nodeOf})
			rts, errs := initEach(t, group, func(int) []Option { return []Option{WithDynamicProcessSets()} })
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error {
				if got := r.Nodes(); !slices.EqualFunc(got, tt.want, slices.Equal) {
					return fmt.Errorf("Nodes %v, want %v", got, tt.want)
				}
				ps, err := r.AddNodeProcessSets(ctxT(t))
				if err != nil {
					return err
				}
				var node []int
				for _, n := range tt.want {
					if slices.Contains(n, rank) {
						node = n
					}
				}
				if !slices.Equal(ps.Ranks(), node) || !ps.Included() {
					return fmt.Errorf("node set %v (included %v), want %v", ps.Ranks(), ps.Included(), node)
				}
				if len(tt.want) == 1 && ps.ID() != 0 {
					return fmt.Errorf("one node: set id %d, want the global set", ps.ID())
				}
				y, err := r.Allreduce(ctxT(t), tensor.FromFloat64([]float64{float64(rank)}), "node.sum", Sum, InProcessSet(ps))
				if err != nil {
					return err
				}
				want := 0.0
				for _, g := range node {
					want += float64(g)
				}
				if y.Float64s()[0] != want {
					return fmt.Errorf("sum within the node %v, want %v", y.Float64s()[0], want)
				}
				return nil
			})
		})
	}
}
