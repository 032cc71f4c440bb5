package embedded

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/tensor"
)

// randomDescs returns the descs of n ranks calling a collective of kind
// k: alike, then with a few fields changed on a few ranks (some of which
// verdict compares, some not), or an error of a rank's own.
func randomDescs(rng *rand.Rand, k kind, n int) []desc {
	base := desc{kind: k, dtype: tensor.Float32, op: tensor.Sum, root: int64(rng.IntN(n)), n: int64(rng.IntN(4))}
	base.counts = make([]int, n)
	for i := range base.counts {
		base.counts[i] = rng.IntN(3)
	}
	m := make([][]int, n) // alltoallv: m[s][d] is what s sends d
	for s := range m {
		m[s] = make([]int, n)
		for d := range m[s] {
			m[s][d] = rng.IntN(3)
		}
	}
	ds := make([]desc, n)
	for r := range ds {
		ds[r] = base
		ds[r].counts = append([]int(nil), base.counts...)
		if k == kAlltoallv {
			ds[r].counts = append([]int(nil), m[r]...)
		}
		ds[r].recvCounts = make([]int, n) // as Check leaves them: one per rank
		for s := range n {
			ds[r].recvCounts[s] = m[s][r]
		}
	}
	for range rng.IntN(3) {
		d := &ds[rng.IntN(n)]
		switch rng.IntN(9) {
		case 0:
			d.kind = kind(1 + rng.IntN(int(kBarrier)))
		case 1:
			d.dtype = tensor.Int32
		case 2:
			d.op = tensor.Max
		case 3:
			d.root = (d.root + 1) % int64(n)
		case 4:
			d.n++
		case 5:
			d.counts[rng.IntN(n)]++
		case 6:
			d.recvCounts[rng.IntN(n)]++
		case 7:
			d.hasErr, d.errText = true, "own error"
		case 8:
			d.color, d.key = 5, 7 // not compared by any collective
		}
	}
	return ds
}

// TestDigestMatchesVerdict: the combined digest says "agree" exactly when
// verdict accepts the calls, for every collective, over random calls that
// agree or differ in one field or another, at sizes that are and are not
// powers of two.
func TestDigestMatchesVerdict(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 1))
	agreed := 0
	for i := range 20000 {
		n := 1 + rng.IntN(9)
		k := kind(1 + rng.IntN(int(kBarrier)))
		ds := randomDescs(rng, k, n)
		all := make([]byte, digestLen)
		one := make([]byte, digestLen)
		for r := range ds {
			if r == 0 {
				putDigest(all, &ds[r], r, n)
				continue
			}
			putDigest(one, &ds[r], r, n)
			combineDigest(all, one)
		}
		var own error
		if ds[0].hasErr {
			own = errors.New(ds[0].errText)
		}
		want := verdict(ds[0].kind, ds, own) == nil
		if got := digestAgrees(all); got != want {
			t.Fatalf("case %d: %d ranks, descs %+v: digest agrees %v, verdict accepts %v", i, n, ds, got, want)
		}
		if want {
			agreed++
		}
	}
	if agreed < 1000 || agreed > 19000 {
		t.Errorf("%d of 20000 random cases agree: the cases do not cover both outcomes", agreed)
	}
}

// TestAgreementFallback: where one rank's arguments differ, or are wrong
// on that rank alone, every rank gets the error it got before the digest
// (the full exchange's verdict), the same text on every rank but the one
// with its own error, which gets that; the digest alone settles the
// calls that agree, with no exchange of descs.
func TestAgreementFallback(t *testing.T) {
	const n = 7
	cs := localGroup(t, n, GroupOptions{Unix: true})
	var mu sync.Mutex
	exchanged := 0
	peerHook = func(c *Comm, r int) {
		if c.fp == checkFP {
			mu.Lock()
			exchanged++
			mu.Unlock()
		}
	}
	t.Cleanup(func() { peerHook = nil })
	run := func(f func(c *Comm) error) []error { return commtest.OnRanks(cs, f) }
	for r, err := range run(func(c *Comm) error { return c.Allreduce(block(0, 4), tensor.Sum) }) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if exchanged != 0 {
		t.Errorf("an allreduce that agrees exchanged %d desc frames, want none", exchanged)
	}
	const want = "comm: allreduce: arguments disagree across ranks: element counts 4 (rank 0) and 5 (rank 3)"
	for r, err := range run(func(c *Comm) error { return c.Allreduce(block(0, 4+btoi(c.Rank() == 3)), tensor.Sum) }) {
		if err == nil || err.Error() != want {
			t.Errorf("rank %d: %v, want %q", r, err, want)
		}
	}
	if exchanged != 2*n*(n-1) {
		t.Errorf("the mismatch exchanged %d desc frames, want %d (every rank's to every other)", exchanged, 2*n*(n-1))
	}
	const own = "comm: allgatherv: negative count -1 for rank 2"
	errs := run(func(c *Comm) error {
		cnt := []int{1, 1, 1, 1, 1, 1, 1}
		if c.Rank() == 2 {
			cnt[2] = -1
		}
		return c.Allgatherv(block(c.Rank(), 1), sentinel(n), cnt)
	})
	for r, err := range errs {
		want := "comm: allgatherv: arguments disagree across ranks: rank 2: " + own
		if r == 2 {
			want = own
		}
		var mm *comm.MismatchError
		if err == nil || err.Error() != want || (r != 2) != errors.As(err, &mm) {
			t.Errorf("rank %d: %v, want %q", r, err, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
