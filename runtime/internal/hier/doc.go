// Package hier runs Horovod's hierarchical collectives over the
// comm.Communicator interface: an allreduce and an allgather that move most
// data within nodes and as little as possible between them. It is pure: no
// goroutines and no I/O besides the communicators' calls, so the tests run
// it on in-memory groups whose ranks are placed on simulated nodes.
//
// # Layout
//
// A Layout is the node of every rank of a group, nodes numbered 0, 1, ...
// in the order of their lowest rank, with each node's ranks and local size,
// each rank's local rank (its index among its node's ranks, in rank order),
// and whether the nodes are homogeneous (all of one size) and contiguous
// (each node's ranks consecutive). A node's ranks need not be consecutive:
// ranks 0 and 2 on node 0 and ranks 1 and 3 on node 1 is a layout. Discover
// learns it with two allgathers: over the node group, of the members' ranks
// (the lowest labels the node), then over the group, of every rank's label,
// local rank and local size, which every rank checks and numbers alike.
//
// Open, called once per group by every rank, makes the communicators:
// Local, the ranks of this rank's node (SplitLocal), and Cross, the ranks
// with this rank's local rank, one per node, in rank order
// (Split(localRank, rank)); the Cross of local rank 0 holds one rank of
// every node, in node order.
//
// # Allreduce
//
// On homogeneous nodes of L ranks, Comms.Allreduce splits the n elements
// into L pieces whose sizes differ by at most one (the remainder going to
// the first pieces) and runs
//
//  1. ReduceScatter within the node: local rank k holds the node's
//     reduction of piece k (in a scratch buffer the Comms keeps);
//  2. Allreduce of piece k across nodes on Cross: the L cross groups run
//     in parallel, one piece each, so every link between nodes carries
//     1/L of the data;
//  3. Allgatherv within the node of the pieces, back into the buffer.
//
// On nodes of different sizes it reduces onto local rank 0 (a
// ReduceScatter whose counts give local rank 0 everything), allreduces
// across nodes among the local ranks 0 (whose Cross holds one rank of every
// node) and broadcasts within the node from local rank 0. On one node it is
// the node group's allreduce; a rank alone on its node skips the node steps;
// an empty buffer moves nothing. Integer and bool results equal the flat
// allreduce's bit for bit; floating-point sums and products are combined in
// another order and may round differently.
//
// # Allgather
//
// Comms.Allgatherv gathers each node's blocks onto its local rank 0
// (Gatherv), allgathers the nodes' blocks among the local ranks 0 (Cross,
// with per-node totals), and broadcasts the whole result within each node.
// The cross step yields the blocks in node order; when the nodes' ranks are
// not consecutive it is staged in scratch and each rank's block copied to
// its place in rank order. On one node, or one rank per node, it is one
// Allgatherv of the node group or of the cross group, which then is the
// group in rank order.
//
// # Failures
//
// Arguments one rank can check alone are checked before anything moves. An
// error from a step, though, leaves the ranks out of step: some may wait in
// a collective of a node or cross group that a failed rank will never
// call. So the rank that saw it aborts its Local and Cross (where they are
// comm.Aborters, as the in-memory group is); the ranks waiting in them get
// a *comm.PeerError and abort theirs, which reaches every rank, since the
// node groups and the cross group of local rank 0 connect them all. The
// Comms is then spent: later calls return an error matching comm.ErrClosed.
// Communicators that cannot abort (MPI's) are left alone, and ranks waiting
// elsewhere are not released: there a failed collective ends the job.
//
// # Cost model
//
// CrossNodeBytes and AllgatherCrossNodeBytes give, for a collective of b
// bytes, the bytes that cross node boundaries (summed over all ranks'
// sends) for a flat ring over all N ranks in rank order and for the
// hierarchical algorithm on M nodes. With X the number of ring edges
// r -> r+1 mod N that join different nodes:
//
//	allreduce  flat  X·2(N-1)/N·b   hier  2(M-1)·b
//	allgather  flat  X·(N-1)/N·b    hier  (M-1)·b
//
// For b = 100 MiB:
//
//	layout                allreduce flat / hier    allgather flat / hier
//	2 nodes x 2 ranks     300 MiB / 200 MiB        150 MiB / 100 MiB
//	3 nodes x 2 ranks     500 MiB / 400 MiB        250 MiB / 200 MiB
//	nodes [0 1 0 1]       600 MiB / 200 MiB        300 MiB / 100 MiB
//
// The hierarchical traffic does not depend on where the ranks sit; the
// flat ring's grows with every edge between nodes. The model counts bytes,
// not time: it leaves out latency (the hierarchical algorithms take more
// steps) and that on homogeneous nodes the allreduce's L cross steps run in
// parallel, each on 1/L of the buffer.
package hier
