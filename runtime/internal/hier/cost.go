package hier

// Traffic is the number of bytes that cross node boundaries during one
// collective, summed over every rank's sends: a byte sent from a rank on one
// node to a rank on another counts once, and bytes that stay within a node
// count nothing. It models bandwidth only (no latency, no contention), with
// the bandwidth-optimal ring algorithms.
type Traffic struct {
	Flat float64 // one ring over all the ranks of the group, in rank order
	Hier float64 // the hierarchical algorithm of this package
}

// ringCrossings returns how many edges of the ring over all ranks in rank
// order, r -> (r+1) mod N, join ranks on different nodes (0 for one rank).
func ringCrossings(l Layout) int {
	n, x := l.Size(), 0
	if n < 2 {
		return 0
	}
	for r := range n {
		if l.Node(r) != l.Node((r+1)%n) {
			x++
		}
	}
	return x
}

// CrossNodeBytes returns the bytes that cross node boundaries during an
// allreduce of b bytes on layout l, with N = l.Size() ranks on M = l.Nodes()
// nodes:
//
//   - Flat: a ring allreduce over all N ranks in rank order sends
//     2(N-1)/N·b bytes from every rank to the next (a reduce-scatter and an
//     allgather, N-1 steps of b/N each); only the X ring edges that join
//     ranks on different nodes count: Flat = X·2(N-1)/N·b.
//   - Hier: the steps within a node cross nothing. The cross step is a ring
//     allreduce among M ranks, one per node, of piece k (b_k bytes) for each
//     local rank k on homogeneous nodes, or of the whole buffer among the
//     local ranks 0 otherwise; each of its M ranks sends 2(M-1)/M·b_k over
//     an edge between nodes, and the pieces add up to b: Hier = 2(M-1)·b.
//
// On 2 nodes of 2 ranks X = 2, so Flat = 3b and Hier = 2b; on 3 nodes of 2
// ranks X = 3, so Flat = 5b and Hier = 4b. When the nodes' ranks are not
// consecutive, X, and with it the flat ring's traffic, grows (up to N on
// ranks that alternate between nodes, Flat = 2(N-1)·b), while Hier does
// not depend on the order.
func CrossNodeBytes(l Layout, b float64) Traffic {
	n, m := float64(l.Size()), float64(l.Nodes())
	if l.Size() == 0 {
		return Traffic{}
	}
	return Traffic{
		Flat: float64(ringCrossings(l)) * 2 * (n - 1) / n * b,
		Hier: 2 * (m - 1) * b,
	}
}

// AllgatherCrossNodeBytes returns the bytes that cross node boundaries
// during an allgather whose result is b bytes, every rank contributing b/N,
// on layout l (N ranks on M nodes, X ring edges between nodes as for
// CrossNodeBytes):
//
//   - Flat: a ring allgather over all N ranks in rank order forwards every
//     block but its successor's own, (N-1)/N·b bytes from every rank to the
//     next: Flat = X·(N-1)/N·b.
//   - Hier: the gather and the broadcast within a node cross nothing. The
//     cross step is a ring allgather among the M local ranks 0 of the
//     nodes' blocks; each sends every block but its successor's, b minus
//     that block, which adds up to M·b - b: Hier = (M-1)·b, whatever the
//     sizes of the nodes.
//
// On 2 nodes of 2 ranks Flat = 1.5b and Hier = b; on 3 nodes of 2 ranks
// Flat = 2.5b and Hier = 2b.
func AllgatherCrossNodeBytes(l Layout, b float64) Traffic {
	n, m := float64(l.Size()), float64(l.Nodes())
	if l.Size() == 0 {
		return Traffic{}
	}
	return Traffic{
		Flat: float64(ringCrossings(l)) * (n - 1) / n * b,
		Hier: (m - 1) * b,
	}
}
