package cycle

import (
	"slices"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// SetsFault is what InitSets finds wrong with the processes' static
// process sets; Kind says which of its fields hold the details.
type SetsFault struct {
	Kind SetsFaultKind
	// Rank is the process the fault is found at: the one whose message
	// does not decode, whose problem is reported, or whose sets do not
	// match rank 0's.
	Rank int
	// Problem is the text of a problem Rank found alone (SetsProblem).
	Problem string
	// Count and Count0 are Rank's and rank 0's numbers of sets
	// (SetsMismatch).
	Count, Count0 int
}

// SetsFaultKind is the kind of a SetsFault.
type SetsFaultKind int

// The kinds of SetsFault.
const (
	SetsBadEncoding SetsFaultKind = iota // Rank's message does not decode
	SetsProblem                          // Rank found a problem alone
	SetsMismatch                         // Rank has a different number of sets, or of sets from communicators
)

// InitSets decides, from every process's wire.SetsInit message at Init
// (by rank), the number of static process sets and the global ranks of
// each set made from a communicator (in the order given, each ascending),
// or the fault every process reports alike: the lowest rank's.
func InitSets(all [][]byte) (count int, commSets [][]int, fault *SetsFault) {
	counts := make([]int, len(all))
	commRanks := make([][]int, len(all))
	for rk, b := range all {
		in, err := wire.DecodeSetsInit(b)
		if err != nil {
			return 0, nil, &SetsFault{Kind: SetsBadEncoding, Rank: rk}
		}
		if in.Problem != "" {
			return 0, nil, &SetsFault{Kind: SetsProblem, Rank: rk, Problem: in.Problem}
		}
		counts[rk] = in.Count
		commRanks[rk] = in.CommRanks
	}
	for rk := range counts {
		if counts[rk] != counts[0] || len(commRanks[rk]) != len(commRanks[0]) {
			return 0, nil, &SetsFault{Kind: SetsMismatch, Rank: rk, Count: counts[rk], Count0: counts[0]}
		}
	}
	if len(all) == 0 {
		return 0, nil, nil
	}
	commSets = make([][]int, len(commRanks[0]))
	for j := range commSets {
		// The members, ordered by their rank in the communicator, are
		// the set; its ranks are kept ascending.
		type member struct{ global, sub int }
		var ms []member
		for rk := range commRanks {
			if s := commRanks[rk][j]; s >= 0 {
				ms = append(ms, member{rk, s})
			}
		}
		slices.SortFunc(ms, func(a, b member) int { return a.sub - b.sub })
		ranks := make([]int, len(ms))
		for k, m := range ms {
			ranks[k] = m.global
		}
		slices.Sort(ranks)
		commSets[j] = ranks
	}
	return counts[0], commSets, nil
}

// Differing returns the first rank whose message is not the same as rank
// 0's, or -1 when every rank sent the same: the processes' static sets'
// ranks at Init, or a dynamic registration, must agree.
func Differing(all [][]byte) int {
	for rk, b := range all {
		if string(b) != string(all[0]) {
			return rk
		}
	}
	return -1
}
