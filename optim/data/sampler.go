package data

import (
	"fmt"
	"math/rand/v2"
)

// Sampler shards the indices [0, N) of a dataset among Size ranks. The zero
// value is not usable; build one with NewSampler.
type Sampler struct {
	n, rank, size int
	shuffle       bool
	seed          uint64
	dropLast      bool
	epoch         int
}

// Option configures a Sampler.
type Option func(*Sampler)

// Shuffle sets whether indices are permuted each epoch (default true) and
// the seed of the permutation (default 0). All ranks must use the same seed.
func Shuffle(on bool, seed uint64) Option {
	return func(s *Sampler) { s.shuffle, s.seed = on, seed }
}

// DropLast drops the tail of the (shuffled) indices that does not divide
// evenly among the ranks, instead of padding it by wrapping around to the
// start (the default).
func DropLast() Option { return func(s *Sampler) { s.dropLast = true } }

// NewSampler returns the sampler of rank among size ranks over a dataset of
// n samples. It returns an error if rank is not in [0, size), n is
// negative, or n < size with DropLast (no rank would get a sample).
func NewSampler(n, rank, size int, opts ...Option) (*Sampler, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("data: rank %d is not in [0, %d)", rank, size)
	}
	if n < 0 {
		return nil, fmt.Errorf("data: dataset size %d is negative", n)
	}
	s := &Sampler{n: n, rank: rank, size: size, shuffle: true}
	for _, o := range opts {
		o(s)
	}
	if s.dropLast && n < size {
		return nil, fmt.Errorf("data: %d samples cannot be shared among %d ranks without padding", n, size)
	}
	return s, nil
}

// SetEpoch sets the epoch whose indices Indices returns; with shuffling on,
// each epoch has its own permutation, the same on every rank.
func (s *Sampler) SetEpoch(epoch int) { s.epoch = epoch }

// Epoch returns the epoch set by SetEpoch.
func (s *Sampler) Epoch() int { return s.epoch }

// Len returns the number of indices each rank gets per epoch: ⌈N/size⌉ when
// padding, ⌊N/size⌋ with DropLast.
func (s *Sampler) Len() int {
	if s.dropLast {
		return s.n / s.size
	}
	return (s.n + s.size - 1) / s.size
}

// Indices returns this rank's sample indices for the current epoch.
func (s *Sampler) Indices() []int {
	per := s.Len()
	if per == 0 {
		return []int{}
	}
	all := make([]int, s.n)
	for i := range all {
		all[i] = i
	}
	if s.shuffle {
		// PCG seeded from (seed, epoch): the same permutation on every rank.
		r := rand.New(rand.NewPCG(s.seed, uint64(s.epoch)))
		r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	}
	out := make([]int, per)
	for k := range out {
		// Position rank + k·size of the padded (wrapped) sequence.
		out[k] = all[(s.rank+k*s.size)%s.n]
	}
	return out
}

// Batches splits this rank's indices for the current epoch into batches of
// batchSize; the last, shorter batch is kept unless dropLast. Every rank gets
// the same number of batches, of the same sizes. It panics if batchSize < 1.
func (s *Sampler) Batches(batchSize int, dropLast bool) [][]int {
	if batchSize < 1 {
		panic(fmt.Sprintf("data: batch size %d", batchSize))
	}
	idx := s.Indices()
	var out [][]int
	for lo := 0; lo < len(idx); lo += batchSize {
		hi := min(lo+batchSize, len(idx))
		if hi-lo < batchSize && dropLast {
			break
		}
		out = append(out, idx[lo:hi])
	}
	return out
}
