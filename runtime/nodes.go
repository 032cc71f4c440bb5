package runtime

import (
	"fmt"
	"slices"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/hier"
	"github.com/gohorovod/gohorovod/runtime/internal/steps"
	"github.com/gohorovod/gohorovod/tensor"
)

// splitNodes returns this rank's node communicator (the local one) and the
// node of every rank, numbered by the node's lowest rank. The nodes are
// the transport's (shared memory under MPI, the launcher's host names over
// the embedded transport) unless HOROVOD_HOSTNAME names them (Config.
// Hostname, outside the embedded transport, where it is the launcher's
// host already): every rank must then set it, and the ranks with the same
// name form a node, so that the ranks of one machine can form several.
// byHost says that com is the embedded transport's.
func splitNodes(com comm.Communicator, cfg config.Config, byHost bool) (comm.Communicator, []int, error) {
	var local comm.Communicator
	if byHost || com.Size() == 1 {
		c, err := com.SplitLocal()
		if err != nil {
			return nil, nil, err
		}
		local = c
	} else {
		names, err := steps.Gather(com, []byte(cfg.Hostname))
		if err != nil {
			return nil, nil, fmt.Errorf("gathering host names: %w", err)
		}
		named := 0
		for _, n := range names {
			if len(n) > 0 {
				named++
			}
		}
		switch named {
		case 0:
			c, err := com.SplitLocal()
			if err != nil {
				return nil, nil, err
			}
			local = c
		case len(names):
			color := slices.IndexFunc(names, func(n []byte) bool { return string(n) == cfg.Hostname })
			c, err := com.Split(color, com.Rank())
			if err != nil {
				return nil, nil, err
			}
			local = c
		default:
			return nil, nil, fmt.Errorf("%s is set on %d of %d ranks: set it on every rank (it names the rank's node) or on none",
				config.EnvHostname, named, len(names))
		}
	}
	// Each rank's node: the lowest rank of its local group, gathered.
	mine := make([]int64, local.Size())
	ones := make([]int, local.Size())
	for i := range ones {
		ones[i] = 1
	}
	if err := local.Allgatherv(tensor.FromInt64([]int64{int64(com.Rank())}), tensor.FromInt64(mine), ones); err != nil {
		local.Close()
		return nil, nil, fmt.Errorf("gathering the node's ranks: %w", err)
	}
	all := make([]int64, com.Size())
	ones = make([]int, com.Size())
	for i := range ones {
		ones[i] = 1
	}
	if err := com.Allgatherv(tensor.FromInt64([]int64{slices.Min(mine)}), tensor.FromInt64(all), ones); err != nil {
		local.Close()
		return nil, nil, fmt.Errorf("gathering the nodes: %w", err)
	}
	nodes := make([]int, len(all))
	for i, v := range all {
		nodes[i] = int(v)
	}
	return local, nodes, nil
}

// unevenNodesWarning is Horovod's warning when hierarchical collectives run
// on nodes with different numbers of ranks.
const unevenNodesWarning = "WARNING: Using different number of ranks per node might cause performance loss in " +
	"hierarchical allgather and hierarchical allreduce. Consider assigning the same number of ranks to each node, " +
	"or disabling hierarchical allgather and hierarchical allreduce."

// openHier opens the node-aware communicators of the loop's set when
// HOROVOD_HIERARCHICAL_ALLREDUCE or _ALLGATHER asks for them: collective
// over the set's communicator (Init for the global set, the registration
// for the others). With one node the knobs are ignored, as in Horovod, and
// the set's rank 0 says so in the log.
func (l *loop) openHier(ranks []int) error {
	// Autotuning may switch them on, on the global set.
	tunable := l.cfg.Autotune && l.global == nil
	if !l.cfg.HierarchicalAllreduce && !l.cfg.HierarchicalAllgather && !tunable {
		return nil
	}
	nodes := l.r.nodes
	first := nodes[ranks[0]]
	one := true
	for _, g := range ranks {
		if nodes[g] != first {
			one = false
			break
		}
	}
	if one {
		if l.rank == 0 {
			l.log.Info().Int("process_set", l.setID()).
				Msg("hierarchical allreduce and allgather are ignored: every rank of the process set is on one node")
		}
		return nil
	}
	local, err := l.com.Split(nodes[ranks[l.rank]], l.rank)
	if err != nil {
		return fmt.Errorf("hierarchical collectives: node communicator: %w", err)
	}
	h, err := hier.OpenLocal(l.com, local)
	if err != nil {
		return fmt.Errorf("hierarchical collectives: %w", err)
	}
	l.p.hier = h
	if l.rank == 0 {
		if !h.Layout.Homogeneous() {
			l.log.Warn().Msg(unevenNodesWarning)
		}
		l.log.Debug().Int("process_set", l.setID()).Str("layout", h.Layout.String()).
			Bool("allreduce", l.cfg.HierarchicalAllreduce).Bool("allgather", l.cfg.HierarchicalAllgather).
			Msg("hierarchical collectives on")
	}
	return nil
}

// setID is the loop's process set id (0 before registration: the global
// set's loop at Init).
func (l *loop) setID() int {
	if l.set == nil {
		return 0
	}
	return l.set.id
}

// closeHier releases the node-aware communicators.
func (p *performer) closeHier() {
	if p.hier != nil {
		if err := p.hier.Close(); err != nil {
			p.log.Debug().Err(err).Msg("closing the hierarchical communicators")
		}
		p.hier = nil
	}
}
