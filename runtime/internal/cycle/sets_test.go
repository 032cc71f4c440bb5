package cycle

import (
	"reflect"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

func TestInitSets(t *testing.T) {
	enc := func(ins ...wire.SetsInit) [][]byte {
		var all [][]byte
		for i := range ins {
			all = append(all, wire.AppendSetsInit(nil, &ins[i]))
		}
		return all
	}
	// Two sets from communicators: ranks 2 and 0 (in that order in the
	// communicator) and rank 1 alone, plus one set of ranks.
	count, sets, fault := InitSets(enc(
		wire.SetsInit{Count: 3, CommRanks: []int{1, -1}},
		wire.SetsInit{Count: 3, CommRanks: []int{-1, 0}},
		wire.SetsInit{Count: 3, CommRanks: []int{0, -1}}))
	if fault != nil || count != 3 || !reflect.DeepEqual(sets, [][]int{{0, 2}, {1}}) {
		t.Errorf("InitSets = %d, %v, %+v", count, sets, fault)
	}
	if count, sets, fault := InitSets(enc(wire.SetsInit{}, wire.SetsInit{})); fault != nil || count != 0 || len(sets) != 0 {
		t.Errorf("no sets: InitSets = %d, %v, %+v", count, sets, fault)
	}
	for _, tt := range []struct {
		name string
		all  [][]byte
		want SetsFault
	}{
		{"problem", enc(wire.SetsInit{Count: 1}, wire.SetsInit{Problem: "nil", Count: 1}, wire.SetsInit{Problem: "later"}),
			SetsFault{Kind: SetsProblem, Rank: 1, Problem: "nil"}},
		{"count", enc(wire.SetsInit{Count: 1}, wire.SetsInit{Count: 1}, wire.SetsInit{Count: 2}),
			SetsFault{Kind: SetsMismatch, Rank: 2, Count: 2, Count0: 1}},
		{"communicators", enc(wire.SetsInit{Count: 1, CommRanks: []int{0}}, wire.SetsInit{Count: 1}),
			SetsFault{Kind: SetsMismatch, Rank: 1, Count: 1, Count0: 1}},
		{"encoding", [][]byte{wire.AppendSetsInit(nil, &wire.SetsInit{}), {0xff}}, SetsFault{Kind: SetsBadEncoding, Rank: 1}},
	} {
		_, _, fault := InitSets(tt.all)
		if fault == nil || *fault != tt.want {
			t.Errorf("%s: fault %+v, want %+v", tt.name, fault, tt.want)
		}
	}
}

func TestDiffering(t *testing.T) {
	a, b := []byte("a"), []byte("b")
	for _, tt := range []struct {
		all  [][]byte
		want int
	}{{[][]byte{a}, -1}, {[][]byte{a, a, a}, -1}, {[][]byte{a, a, b, b}, 2}, {[][]byte{a, nil}, 1}} {
		if got := Differing(tt.all); got != tt.want {
			t.Errorf("Differing(%q) = %d, want %d", tt.all, got, tt.want)
		}
	}
}
