package cache

import "math/bits"

// The status bits at the start of the agreement vector. Each is set to 1
// when its condition is false on this rank, so that after a bitwise AND
// across ranks a cleared bit means "true on some rank".
const (
	StatusShutdown = iota // some rank asks to shut down
	StatusUncached        // some rank has requests that need full negotiation
	StatusInvalid         // some rank found a cached entry with changed parameters
	// StatusJoined follows the opposite rule: it is set when this rank
	// has joined, so that after the AND it is set only when every rank
	// has (and cached responses must not be replayed: nobody submitted
	// them).
	StatusJoined
	NumStatusBits
)

// Sync builds this rank's agreement vector for one cycle and decodes the
// vector after the ranks have ANDed theirs together. It is reused from
// cycle to cycle without allocating.
type Sync struct {
	words   []uint64 // status bits, then one bit per cache bit
	invalid []uint64 // one bit per cache bit
	nbits   int
}

func wordsFor(n int) int { return (n + 63) / 64 }

// Reset starts a cycle for a cache with cacheBits bit positions: every
// status condition false, no hits, no invalid bits.
func (s *Sync) Reset(cacheBits int) {
	s.nbits = cacheBits
	n := wordsFor(cacheBits + NumStatusBits)
	s.words = grow(s.words, n)
	s.invalid = grow(s.invalid, wordsFor(cacheBits))
	s.words[0] = 1<<StatusShutdown | 1<<StatusUncached | 1<<StatusInvalid
}

func grow(w []uint64, n int) []uint64 {
	if cap(w) < n {
		w = make([]uint64, n)
	}
	w = w[:n]
	clear(w)
	return w
}

func setBit(w []uint64, i int)      { w[i/64] |= 1 << (i % 64) }
func clearBit(w []uint64, i int)    { w[i/64] &^= 1 << (i % 64) }
func bitSet(w []uint64, i int) bool { return w[i/64]&(1<<(i%64)) != 0 }

// Hit records that this rank has a request matching cache bit.
func (s *Sync) Hit(bit int) { setBit(s.words, bit+NumStatusBits) }

// MarkInvalid records that cache bit must be erased on every rank.
func (s *Sync) MarkInvalid(bit int) {
	setBit(s.invalid, bit)
	clearBit(s.words, StatusInvalid)
}

// SetShutdown records that this rank asks every rank to shut down.
func (s *Sync) SetShutdown() { clearBit(s.words, StatusShutdown) }

// SetJoined records that this rank has joined (see StatusJoined).
func (s *Sync) SetJoined() { setBit(s.words, StatusJoined) }

// SetUncached records that this rank has requests for full negotiation.
func (s *Sync) SetUncached() { clearBit(s.words, StatusUncached) }

// Words returns the vector to AND across ranks, in place.
func (s *Sync) Words() []uint64 { return s.words }

// InvalidWords returns the invalid-bit vector to OR across ranks, in place,
// when Invalid reports true after the AND.
func (s *Sync) InvalidWords() []uint64 { return s.invalid }

// Shutdown reports, after the AND, whether some rank asked to shut down.
func (s *Sync) Shutdown() bool { return !bitSet(s.words, StatusShutdown) }

// Uncached reports, after the AND, whether some rank needs full negotiation.
func (s *Sync) Uncached() bool { return !bitSet(s.words, StatusUncached) }

// AllJoined reports, after the AND, whether every rank has joined.
func (s *Sync) AllJoined() bool { return bitSet(s.words, StatusJoined) }

// Invalid reports, after the AND, whether some rank found invalid entries.
func (s *Sync) Invalid() bool { return !bitSet(s.words, StatusInvalid) }

// AppendCommonHits appends, in ascending order, the cache bits set on every
// rank (after the AND) to dst.
func (s *Sync) AppendCommonHits(dst []int) []int {
	for wi, w := range s.words {
		if wi == 0 {
			w &^= 1<<NumStatusBits - 1
		}
		for w != 0 {
			t := bits.TrailingZeros64(w)
			dst = append(dst, wi*64+t-NumStatusBits)
			w &= w - 1
		}
	}
	return dst
}

// AppendInvalid appends, in ascending order, the invalid cache bits (after
// the OR) to dst.
func (s *Sync) AppendInvalid(dst []int) []int {
	for wi, w := range s.invalid {
		for w != 0 {
			t := bits.TrailingZeros64(w)
			dst = append(dst, wi*64+t)
			w &= w - 1
		}
	}
	return dst
}

// IsHit reports whether bit is set in the vector (before the AND: a local
// hit; after: a common one).
func (s *Sync) IsHit(bit int) bool { return bitSet(s.words, bit+NumStatusBits) }
