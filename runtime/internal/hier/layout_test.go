package hier

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
)

func TestNewLayout(t *testing.T) {
	tests := []struct {
		node        []int
		ranks       [][]int // of each node
		local       []int   // local rank of each rank
		homogeneous bool
		contiguous  bool
		str         string
	}{
		{[]int{0}, [][]int{{0}}, []int{0}, true, true, "1x1"},
		{[]int{0, 0, 0, 0}, [][]int{{0, 1, 2, 3}}, []int{0, 1, 2, 3}, true, true, "1x4"},
		{[]int{0, 1, 2, 3}, [][]int{{0}, {1}, {2}, {3}}, []int{0, 0, 0, 0}, true, true, "4x1"},
		{[]int{0, 0, 1, 1}, [][]int{{0, 1}, {2, 3}}, []int{0, 1, 0, 1}, true, true, "2x2"},
		{[]int{0, 0, 1, 1, 2, 2}, [][]int{{0, 1}, {2, 3}, {4, 5}}, []int{0, 1, 0, 1, 0, 1}, true, true, "3x2"},
		{[]int{0, 0, 0, 1, 2, 2}, [][]int{{0, 1, 2}, {3}, {4, 5}}, []int{0, 1, 2, 0, 0, 1}, false, true, "3+1+2"},
		{[]int{0, 1, 0, 1}, [][]int{{0, 2}, {1, 3}}, []int{0, 0, 1, 1}, true, false, "nodes[0 1 0 1]"},
		{[]int{0, 1, 2, 0, 2, 0}, [][]int{{0, 3, 5}, {1}, {2, 4}}, []int{0, 0, 0, 1, 1, 2}, false, false, "nodes[0 1 2 0 2 0]"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.node), func(t *testing.T) {
			l, err := NewLayout(tt.node)
			if err != nil {
				t.Fatal(err)
			}
			if l.Size() != len(tt.node) || l.Nodes() != len(tt.ranks) {
				t.Errorf("%d ranks on %d nodes, want %d on %d", l.Size(), l.Nodes(), len(tt.node), len(tt.ranks))
			}
			for k, rs := range tt.ranks {
				if !slices.Equal(l.Ranks(k), rs) || l.LocalSize(k) != len(rs) {
					t.Errorf("node %d: ranks %v (local size %d), want %v", k, l.Ranks(k), l.LocalSize(k), rs)
				}
			}
			for r := range tt.node {
				if l.Node(r) != tt.node[r] || l.LocalRank(r) != tt.local[r] {
					t.Errorf("rank %d: node %d, local rank %d; want %d, %d", r, l.Node(r), l.LocalRank(r), tt.node[r], tt.local[r])
				}
			}
			if !slices.Equal(l.NodeOf(), tt.node) {
				t.Errorf("NodeOf %v, want %v", l.NodeOf(), tt.node)
			}
			if l.Homogeneous() != tt.homogeneous || l.Contiguous() != tt.contiguous {
				t.Errorf("homogeneous %v, contiguous %v; want %v, %v", l.Homogeneous(), l.Contiguous(), tt.homogeneous, tt.contiguous)
			}
			if l.String() != tt.str {
				t.Errorf("String %q, want %q", l.String(), tt.str)
			}
		})
	}
}

func TestNewLayoutCopies(t *testing.T) {
	node := []int{0, 1}
	l, err := NewLayout(node)
	if err != nil {
		t.Fatal(err)
	}
	node[1] = 0
	l.NodeOf()[0] = 7
	if !slices.Equal(l.NodeOf(), []int{0, 1}) {
		t.Errorf("layout changed with its argument or NodeOf's result: %v", l.NodeOf())
	}
}

func TestNewLayoutErrors(t *testing.T) {
	tests := []struct {
		node []int
		want string
	}{
		{nil, "no ranks"},
		{[]int{}, "no ranks"},
		{[]int{1, 0}, "rank 0 is on node 1"},
		{[]int{0, 2}, "rank 1 is on node 2"},
		{[]int{0, -1}, "rank 1 is on node -1"},
		{[]int{0, 1, 3, 2}, "rank 2 is on node 3"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.node), func(t *testing.T) {
			_, err := NewLayout(tt.node)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "hier: ") {
				t.Errorf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// testGroup is an in-memory group's placement on nodes, and its layout.
type testGroup struct {
	name string
	opts memcomm.GroupOptions
	node []int // the layout
}

// groupNamed returns the member of groups with this name.
func groupNamed(name string) testGroup {
	for _, g := range groups {
		if g.name == name {
			return g
		}
	}
	panic("no test group " + name)
}

// groups are the placements the collective tests run on: nodes of
// consecutive ranks (GroupOptions.Nodes) and scattered ones (NodeOf, with
// arbitrary labels), and the layout each must discover.
var groups = []testGroup{
	{"2x2", memcomm.GroupOptions{Nodes: []int{2, 2}}, []int{0, 0, 1, 1}},
	{"3x2", memcomm.GroupOptions{Nodes: []int{2, 2, 2}}, []int{0, 0, 1, 1, 2, 2}},
	{"2x3", memcomm.GroupOptions{Nodes: []int{3, 3}}, []int{0, 0, 0, 1, 1, 1}},
	{"1x4", memcomm.GroupOptions{Nodes: []int{4}}, []int{0, 0, 0, 0}},
	{"4x1", memcomm.GroupOptions{Nodes: []int{1, 1, 1, 1}}, []int{0, 1, 2, 3}},
	{"1x1", memcomm.GroupOptions{}, []int{0}},
	{"2+1", memcomm.GroupOptions{Nodes: []int{2, 1}}, []int{0, 0, 1}},
	{"1+3", memcomm.GroupOptions{Nodes: []int{1, 3}}, []int{0, 1, 1, 1}},
	{"3+1+2", memcomm.GroupOptions{Nodes: []int{3, 1, 2}}, []int{0, 0, 0, 1, 2, 2}},
	{"alternating 2x2", memcomm.GroupOptions{NodeOf: []int{0, 1, 0, 1}}, []int{0, 1, 0, 1}},
	{"scattered 2x3", memcomm.GroupOptions{NodeOf: []int{9, 4, 4, 9, 9, 4}}, []int{0, 1, 1, 0, 0, 1}},
	{"scattered 3+1+2", memcomm.GroupOptions{NodeOf: []int{5, 7, 2, 5, 2, 5}}, []int{0, 1, 2, 0, 2, 0}},
}

// newGroup returns the members of an in-memory group with these options.
func newGroup(opts memcomm.GroupOptions) []comm.Communicator {
	n := comm.Sum(opts.Nodes)
	switch {
	case opts.NodeOf != nil:
		n = len(opts.NodeOf)
	case opts.Nodes == nil:
		n = 1
	}
	return memcomm.NewGroupWith(n, opts)
}

func TestOpen(t *testing.T) {
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			want, err := NewLayout(g.node)
			if err != nil {
				t.Fatal(err)
			}
			errs := onRanks(t, newGroup(g.opts), func(c comm.Communicator) error {
				h, err := Open(c)
				if err != nil {
					return err
				}
				defer h.Close()
				l, r := h.Layout, c.Rank()
				var problems []error
				if !slices.Equal(l.NodeOf(), want.NodeOf()) {
					problems = append(problems, fmt.Errorf("layout %v, want %v", l, want))
				}
				if h.Local.Size() != want.LocalSize(want.Node(r)) || h.Local.Rank() != want.LocalRank(r) {
					problems = append(problems, fmt.Errorf("local rank %d of %d, want %d of %d", h.Local.Rank(), h.Local.Size(), want.LocalRank(r), want.LocalSize(want.Node(r))))
				}
				// The cross group of local rank k: the ranks with local
				// rank k (one on each node with more than k ranks), in
				// rank order.
				k, rank, size := want.LocalRank(r), 0, 0
				for s := range want.Size() {
					if want.LocalRank(s) == k {
						if s == r {
							rank = size
						}
						size++
					}
				}
				if h.Cross.Size() != size || h.Cross.Rank() != rank {
					problems = append(problems, fmt.Errorf("cross rank %d of %d, want %d of %d", h.Cross.Rank(), h.Cross.Size(), rank, size))
				}
				return errors.Join(problems...)
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestDiscoverUnordered gives Discover node groups ordered against rank
// order, which the contract of SplitLocal excludes: every rank must get the
// same error rather than a wrong layout.
func TestDiscoverUnordered(t *testing.T) {
	errs := onRanks(t, memcomm.NewGroupNodes(2, 2), func(c comm.Communicator) error {
		local, err := c.Split(c.Rank()/2, -c.Rank())
		if err != nil {
			return err
		}
		defer local.Close()
		l, err := Discover(c, local)
		if err == nil {
			return fmt.Errorf("discovered %v, want an error", l)
		}
		if !strings.Contains(err.Error(), "ordered by rank") {
			return fmt.Errorf("error %v, want one about the order", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestFromTable(t *testing.T) {
	tests := []struct {
		name  string
		table []int64 // lowest rank, local rank, local size of each rank
		want  []int   // the layout, or nil for an error
		err   string
	}{
		{"scattered", []int64{0, 0, 2, 1, 0, 1, 0, 1, 2}, []int{0, 1, 0}, ""},
		{"label above rank", []int64{1, 0, 2, 1, 1, 2}, nil, "rank 0 names rank 1"},
		{"label not its own lowest", []int64{0, 0, 2, 0, 1, 2, 1, 0, 1}, nil, "rank 2 names rank 1"},
		{"bad local rank", []int64{0, 1, 2, 0, 0, 2}, nil, "rank 0 has local rank 1"},
		{"bad local size", []int64{0, 0, 3, 0, 1, 3}, nil, "rank 0 has 3 ranks on its node, but 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := fromTable(tt.table)
			if tt.want != nil {
				if err != nil || !slices.Equal(l.NodeOf(), tt.want) {
					t.Errorf("got %v, %v; want %v", l, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want one mentioning %q", err, tt.err)
			}
		})
	}
}
