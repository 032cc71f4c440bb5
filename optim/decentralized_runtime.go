package optim

import (
	"context"
	"fmt"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// NewHierarchy returns the two levels of hierarchical decentralized SGD
// over r's nodes (hvd.Runtime.Nodes): each node's process set
// (AddNodeProcessSets) and a process set of the node leaders, each node's
// lowest rank (the global set where every node has one rank). Like
// AddProcessSet, every process calls it at the same point, and r needs
// dynamic process sets unless no set is missing.
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
	h := &Hierarchy{Node: nodeColl, Nodes: len(nodes)}
	var leaders Collectives
	if len(nodes) == r.Size() {
		leaders, err = FromRuntime(r)
	} else {
		ranks := make([]int, len(nodes))
		for i, n := range nodes {
			ranks[i] = n[0]
		}
		var ps *hvd.ProcessSet
		if ps, err = r.AddProcessSet(ctx, ranks); err == nil && ps.Included() {
			leaders, err = FromProcessSet(r, ps)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("optim: the node leaders' process set: %w", err)
	}
	if leaders != nil {
		h.Leaders = leaders.(ExchangeCollectives)
	}
	return h, nil
}
