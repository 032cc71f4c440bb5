// Package emucluster makes an emulated cluster on one Linux machine: N
// nodes, each a network namespace with its own address and hostname,
// joined by a bridge in a namespace of their own (the switch), each node's
// link shaped by tc to a rate in both directions, with packet loss, and
// with a switch that can silence one node's link (every packet dropped, no
// reset sent) and mend it. Only addresses inside these namespaces are used:
// nothing reaches the machine's own network.
//
// The kernels this was written for have no netem qdisc and few classifiers,
// so everything is built from htb, u32 and the blackhole qdisc:
//
//   - rate: an htb class on each end of the node's veth pair (the node's
//     side shapes what it sends, the switch's side what it receives);
//   - loss: u32 filters that send a share of the packets, chosen by the low
//     bits of their IPv4 identification field, to a class whose qdisc is
//     the blackhole. A connected TCP socket numbers its packets one by one,
//     so the drops are spread evenly along every flow; the link's segment
//     offload is cut to one segment so that a drop is one packet, not a
//     64 KiB burst;
//   - silence: one more u32 filter, ahead of the others, that sends every
//     packet to the blackhole; mending removes it.
//
// Plan and LossMatches are pure (they say which ip and tc commands build a
// cluster), so they are tested anywhere; New runs them and needs root and
// iproute2, and returns an error wrapping ErrUnsupported where the machine
// cannot (tests skip with its text).
//
// The command emucluster (cmd/emucluster) wraps this package for shell
// use: up, down, exec on a node, silence and mend, and an ssh stand-in
// that lets gohorovodrun -H and mpirun reach the nodes as if over ssh.
package emucluster
