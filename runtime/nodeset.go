package runtime

import (
	"context"
	"fmt"
	"slices"
)

// Nodes returns the global ranks of every node of the job, each node's
// ranks ascending and the nodes in the order of their lowest rank (nil
// before Init). A node is what LocalRank and LocalSize count: the
// transport's (the ranks that share memory under MPI, the launcher's hosts
// over the embedded transport), or the ranks that give HOROVOD_HOSTNAME the
// same value, which lets one machine act as several nodes. Every process
// gets the same layout.
func (r *Runtime) Nodes() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st == stateNew || r.nodes == nil {
		return nil
	}
	return groupNodes(r.nodes)
}

// groupNodes turns each rank's node (its lowest rank) into the ranks of
// every node, in the order of their lowest rank.
func groupNodes(nodeOf []int) [][]int {
	var out [][]int
	index := make(map[int]int)
	for rank, node := range nodeOf {
		i, ok := index[node]
		if !ok {
			i = len(out)
			index[node] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], rank)
	}
	return out
}

// AddNodeProcessSets makes one process set per node (see Nodes) and
// returns this process's: the set of the ranks on its node, for
// collectives within the node, such as the intra-node averaging of
// hierarchical local SGD (InProcessSet, optim.FromProcessSet). Where a
// registered set has a node's ranks already (the global set, when the
// job runs on one node) that set serves; the others are registered with
// AddProcessSet, node by node in the order of Nodes, so that every process
// must call AddNodeProcessSets at the same point among its AddProcessSet
// and RemoveProcessSet calls, and the runtime needs dynamic process sets
// (WithDynamicProcessSets or HOROVOD_DYNAMIC_PROCESS_SETS=1) unless no set
// is missing.
func (r *Runtime) AddNodeProcessSets(ctx context.Context) (*ProcessSet, error) {
	if err := r.checkRunning(); err != nil {
		return nil, err
	}
	rank := r.Rank()
	var mine *ProcessSet
	for _, ranks := range r.Nodes() {
		ps := r.findProcessSet(ranks)
		if ps == nil {
			var err error
			if ps, err = r.AddProcessSet(ctx, ranks); err != nil {
				return nil, fmt.Errorf("hvd: the process set of the node of ranks %v: %w", ranks, err)
			}
		}
		if slices.Contains(ranks, rank) {
			mine = ps
		}
	}
	return mine, nil
}

// findProcessSet returns the registered set of exactly ranks, or nil.
func (r *Runtime) findProcessSet(ranks []int) *ProcessSet {
	for _, ps := range r.ProcessSets() {
		if slices.Equal(ps.Ranks(), ranks) {
			return ps
		}
	}
	return nil
}
