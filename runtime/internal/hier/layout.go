package hier

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// Layout is the placement of a group's ranks on nodes: the node of every
// rank, with nodes numbered 0, 1, ... in the order of their lowest rank, and
// what follows from it (the ranks and local size of each node, each rank's
// local rank, whether the nodes are homogeneous). A node's ranks need not be
// consecutive in rank order. Make one with NewLayout or Discover; the zero
// Layout has no ranks. A Layout is never modified after it is made, so
// copies may share it.
type Layout struct {
	node        []int   // node of each rank
	local       []int   // local rank of each rank: its index among its node's ranks
	ranks       [][]int // ranks of each node, ascending
	homogeneous bool    // every node holds the same number of ranks
	contiguous  bool    // node is non-decreasing in rank order
}

// NewLayout returns the layout in which rank r of the group is on node
// node[r]. Nodes must be numbered in the order of their lowest rank: node[0]
// is 0, and every rank's node is at most one more than the largest node of
// the ranks before it (so {0, 1, 0, 1} and {0, 0, 1} are layouts, {1, 0} and
// {0, 2} are not). It returns an error for an empty slice or a node out of
// that order; node is copied.
func NewLayout(node []int) (Layout, error) {
	if len(node) == 0 {
		return Layout{}, errors.New("hier: layout of no ranks")
	}
	l := Layout{node: slices.Clone(node), local: make([]int, len(node)), contiguous: true}
	for r, k := range node {
		if k < 0 || k > len(l.ranks) {
			return Layout{}, fmt.Errorf("hier: rank %d is on node %d; nodes are numbered from 0 in the order of their lowest rank, so it must be in [0, %d]", r, k, len(l.ranks))
		}
		if k == len(l.ranks) {
			l.ranks = append(l.ranks, nil)
		}
		if r > 0 && k < node[r-1] {
			l.contiguous = false
		}
		l.local[r] = len(l.ranks[k])
		l.ranks[k] = append(l.ranks[k], r)
	}
	l.homogeneous = true
	for _, rs := range l.ranks {
		if len(rs) != len(l.ranks[0]) {
			l.homogeneous = false
		}
	}
	return l, nil
}

// Size returns the number of ranks in the group.
func (l Layout) Size() int { return len(l.node) }

// Nodes returns the number of nodes.
func (l Layout) Nodes() int { return len(l.ranks) }

// Node returns the node of rank r.
func (l Layout) Node(r int) int { return l.node[r] }

// NodeOf returns a copy of the node of every rank, indexed by rank.
func (l Layout) NodeOf() []int { return slices.Clone(l.node) }

// LocalRank returns rank r's index among the ranks of its node, which are
// ordered by rank (as SplitLocal orders them).
func (l Layout) LocalRank(r int) int { return l.local[r] }

// LocalSize returns the number of ranks on node k.
func (l Layout) LocalSize(k int) int { return len(l.ranks[k]) }

// Ranks returns the ranks on node k, in ascending order. The caller must not
// modify the slice.
func (l Layout) Ranks(k int) []int { return l.ranks[k] }

// Homogeneous reports whether every node holds the same number of ranks
// (true for a group on one node).
func (l Layout) Homogeneous() bool { return l.homogeneous }

// Contiguous reports whether every node's ranks are consecutive in rank
// order (node 0 holds ranks 0 to LocalSize(0)-1, node 1 the next ones, and
// so on), so that concatenating the nodes' blocks in node order gives rank
// order.
func (l Layout) Contiguous() bool { return l.contiguous }

// String describes the layout: "3x2" for 3 nodes of 2 consecutive ranks,
// "3+1+2" for contiguous nodes of different sizes, and the node of every
// rank, as "nodes[0 1 0 1]", when nodes are not contiguous.
func (l Layout) String() string {
	switch {
	case l.Size() == 0:
		return "empty"
	case !l.contiguous:
		return fmt.Sprintf("nodes%v", l.node)
	case l.homogeneous:
		return fmt.Sprintf("%dx%d", l.Nodes(), l.LocalSize(0))
	}
	parts := make([]string, len(l.ranks))
	for k, rs := range l.ranks {
		parts[k] = fmt.Sprint(len(rs))
	}
	return strings.Join(parts, "+")
}

// Discover learns the layout of group c, given local, this rank's member of
// c.SplitLocal() (or any partition of c into node groups, each ordered by
// rank in c). It is collective over c: every rank of c calls it. Two
// collectives run: an Allgatherv over local of the members' ranks in c, from
// which each rank takes the lowest as its node's label, then an Allgatherv
// over c of each rank's label, local rank and local size. From that table,
// the same on every rank, each rank numbers the nodes in order of their
// lowest rank and checks that the node groups are consistent: a label is
// the lowest rank of its group, and each rank's local rank and local size
// agree with the ranks that share its label. When they do not (a local group
// not ordered by rank, say), every rank returns the same error. An error
// from either collective is returned as is, wrapped.
func Discover(c, local comm.Communicator) (Layout, error) {
	ls := local.Size()
	ones := make([]int, ls)
	for i := range ones {
		ones[i] = 1
	}
	members := make([]int64, ls)
	if err := local.Allgatherv(tensor.FromInt64([]int64{int64(c.Rank())}), tensor.FromInt64(members), ones); err != nil {
		return Layout{}, fmt.Errorf("hier: discover: gathering the ranks of this node: %w", err)
	}
	n := c.Size()
	mine := []int64{slices.Min(members), int64(local.Rank()), int64(ls)}
	all := make([]int64, 3*n)
	counts := make([]int, n)
	for i := range counts {
		counts[i] = 3
	}
	if err := c.Allgatherv(tensor.FromInt64(mine), tensor.FromInt64(all), counts); err != nil {
		return Layout{}, fmt.Errorf("hier: discover: gathering every rank's node: %w", err)
	}
	return fromTable(all)
}

// fromTable makes the layout from Discover's table: for each rank r,
// all[3r] is the lowest rank on its node, all[3r+1] its local rank and
// all[3r+2] its local size.
func fromTable(all []int64) (Layout, error) {
	n := len(all) / 3
	label := func(r int) int64 { return all[3*r] }
	node := make([]int, n)
	index := make(map[int64]int) // label -> node
	seen := make(map[int64]int)  // label -> ranks so far
	for r := range n {
		lo, lr := label(r), all[3*r+1]
		if lo < 0 || lo > int64(r) || label(int(lo)) != lo {
			return Layout{}, fmt.Errorf("hier: discover: rank %d names rank %d as the lowest of its node, which is not so", r, lo)
		}
		if lr != int64(seen[lo]) {
			return Layout{}, fmt.Errorf("hier: discover: rank %d has local rank %d, but %d ranks below it share its node (local groups must be ordered by rank)", r, lr, seen[lo])
		}
		seen[lo]++
		k, ok := index[lo]
		if !ok {
			k = len(index)
			index[lo] = k
		}
		node[r] = k
	}
	for r := range n {
		if got, want := all[3*r+2], int64(seen[label(r)]); got != want {
			return Layout{}, fmt.Errorf("hier: discover: rank %d has %d ranks on its node, but %d ranks name its node", r, got, want)
		}
	}
	return NewLayout(node)
}
