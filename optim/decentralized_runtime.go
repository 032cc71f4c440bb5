package optim

import (
	"context"
	"fmt"
	"slices"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// NewHierarchy returns the two levels of hierarchical decentralized SGD
// over r's nodes (hvd.Runtime.Nodes): each node's process set
// (AddNodeProcessSets) and the process set of the node leaders, each
// node's lowest rank (a registered set of those ranks, such as the global
// set where every node has one rank, or one it registers; Close removes
// the latter). Like AddProcessSet, every process calls it at the same
// point, and r needs dynamic process sets unless no set is missing.
func NewHierarchy(ctx context.Context, r *hvd.Runtime) (*Hierarchy, error) {
	node, err := r.AddNodeProcessSets(ctx)
	if err != nil {
		return nil, err
	}
	nodeColl, err := FromProcessSet(r, node)
	if err != nil {
		return nil, err
	}
	nodes := r.Nodes()
	ranks := make([]int, len(nodes))
	for i, n := range nodes {
		ranks[i] = n[0]
	}
	h := &Hierarchy{Node: nodeColl, Nodes: len(nodes), r: r}
	ps := registered(r, ranks)
	if ps == nil {
		if ps, err = r.AddProcessSet(ctx, ranks); err != nil {
			return nil, fmt.Errorf("optim: the node leaders' process set: %w", err)
		}
		h.added = ps
	}
	if ps.Included() {
		leaders, err := FromProcessSet(r, ps)
		if err != nil {
			return nil, err
		}
		h.Leaders = leaders.(ExchangeCollectives)
	}
	return h, nil
}

// registered returns r's process set of exactly ranks, or nil.
func registered(r *hvd.Runtime, ranks []int) *hvd.ProcessSet {
	for _, ps := range r.ProcessSets() {
		if slices.Equal(ps.Ranks(), ranks) {
			return ps
		}
	}
	return nil
}

// Close removes the leaders' process set if NewHierarchy registered it;
// every process calls it, as RemoveProcessSet. A Hierarchy built by hand
// has nothing to remove.
func (h *Hierarchy) Close(ctx context.Context) error {
	if h.added == nil {
		return nil
	}
	ps := h.added
	h.added = nil
	return h.r.RemoveProcessSet(ctx, ps)
}
