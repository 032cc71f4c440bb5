package elastic

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"math/rand/v2"
)

// Sampler deals the sample indices [0, n) of one epoch over the ranks of an
// elastic group, in batches, and resumes mid-epoch when the group changes.
//
// Each epoch has its own permutation of [0, n), drawn from the seed and the
// epoch, the same on every rank. The sampler keeps a position in it: the
// number of samples of the epoch that the whole group has processed. The
// rest of the permutation, from that position, is dealt round-robin: rank r
// of size gets the remaining indices r, r+size, r+2·size, ... and takes them
// batchSize at a time. There is no padding: every sample is dealt exactly
// once, so ranks may get one sample fewer than others, and a rank may get
// an empty last batch. Batches returns the same number of batches on every
// rank so that their collectives stay matched; a rank with an empty batch
// must still take part in the step.
//
// After each training step every rank calls Record once. Because ranks
// consume their shares in lockstep, the group's position is a function of
// the number of steps recorded, the same on every rank without talking:
// after k steps the group has processed a prefix of the remaining
// permutation. SetPlacement re-deals what remains over a new rank and size;
// Restore (through SamplerHandler) goes back to the committed position.
// Neither repeats a sample processed before the position, nor skips one
// after it.
//
// A Sampler is used by one goroutine at a time.
type Sampler struct {
	n, batch   int
	seed       uint64
	rank, size int
	epoch      int
	base       int // position in the epoch when the current deal began
	steps      int // steps recorded since the current deal began
}

// NewSampler returns the sampler of rank among size ranks over a dataset of
// n samples, dealt batchSize at a time (per rank), with permutations drawn
// from seed. All ranks must give the same n, batchSize and seed. It starts
// at epoch 0, position 0.
func NewSampler(n, batchSize int, seed uint64, rank, size int) (*Sampler, error) {
	if n < 0 {
		return nil, fmt.Errorf("elastic: dataset size %d is negative", n)
	}
	if batchSize < 1 {
		return nil, fmt.Errorf("elastic: batch size %d must be at least 1", batchSize)
	}
	s := &Sampler{n: n, batch: batchSize, seed: seed}
	if err := s.SetPlacement(rank, size); err != nil {
		return nil, err
	}
	return s, nil
}

// SetPlacement re-deals the rest of the epoch, from the group's current
// position, over rank among size ranks (call it on every rank of the new
// group, for example from a reset callback). The samples already processed
// stay processed.
func (s *Sampler) SetPlacement(rank, size int) error {
	if size < 1 || rank < 0 || rank >= size {
		return fmt.Errorf("elastic: rank %d is not in [0, %d)", rank, size)
	}
	if s.size > 0 {
		s.base, s.steps = s.Processed(), 0
	}
	s.rank, s.size = rank, size
	return nil
}

// Rank returns the rank the sampler deals for.
func (s *Sampler) Rank() int { return s.rank }

// Size returns the group size the sampler deals over.
func (s *Sampler) Size() int { return s.size }

// SetEpoch starts epoch e at position 0, with its own permutation.
func (s *Sampler) SetEpoch(e int) { s.epoch, s.base, s.steps = e, 0, 0 }

// Epoch returns the current epoch.
func (s *Sampler) Epoch() int { return s.epoch }

// Len returns the dataset size n.
func (s *Sampler) Len() int { return s.n }

// share returns how many of the remaining samples rank r gets in the
// current deal.
func (s *Sampler) share(r int) int {
	rest := s.n - s.base
	if r >= rest {
		return 0
	}
	return (rest - r + s.size - 1) / s.size
}

// Processed returns the group's position: how many samples of the epoch
// the group has processed, on every rank the same.
func (s *Sampler) Processed() int {
	done := s.steps * s.batch
	p := s.base
	// Shares differ by at most one: ranks [0, rest mod size) get one more.
	for r := range s.size {
		p += min(done, s.share(r))
	}
	return p
}

// Remaining returns how many samples of the epoch the group has still to
// process.
func (s *Sampler) Remaining() int { return s.n - s.Processed() }

// perm returns the epoch's permutation.
func (s *Sampler) perm() []int {
	all := make([]int, s.n)
	for i := range all {
		all[i] = i
	}
	r := rand.New(rand.NewPCG(s.seed, uint64(s.epoch)))
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all
}

// Indices returns the indices this rank has still to process in the epoch,
// in order.
func (s *Sampler) Indices() []int {
	all := s.perm()[s.base:]
	skip := s.steps * s.batch
	var out []int
	for k := skip; ; k++ {
		i := s.rank + k*s.size
		if i >= len(all) {
			break
		}
		out = append(out, all[i])
	}
	return out
}

// Batches returns this rank's remaining batches of the epoch: as many on
// every rank (the most any rank needs), of batchSize indices except near
// the end, where some may be shorter or empty.
func (s *Sampler) Batches() [][]int {
	idx := s.Indices()
	left := max(0, s.share(0)-s.steps*s.batch) // rank 0 has the largest share
	nb := (left + s.batch - 1) / s.batch
	out := make([][]int, nb)
	for b := range out {
		lo := min(b*s.batch, len(idx))
		hi := min(lo+s.batch, len(idx))
		out[b] = idx[lo:hi:hi]
	}
	return out
}

// Record records that every rank has processed one more batch (call it on
// every rank after each step, before any Commit of that step).
func (s *Sampler) Record() { s.steps++ }

// samplerState is the part of a Sampler that is committed and synced.
type samplerState struct {
	N, Batch  int
	Seed      uint64
	Epoch     int
	Processed int
}

func (s *Sampler) state() samplerState {
	return samplerState{N: s.n, Batch: s.batch, Seed: s.seed, Epoch: s.epoch, Processed: s.Processed()}
}

func (s *Sampler) setState(st samplerState) error {
	if st.N != s.n || st.Batch != s.batch || st.Seed != s.seed {
		return fmt.Errorf("elastic: sampler of n=%d, batch %d, seed %d given the state of n=%d, batch %d, seed %d",
			s.n, s.batch, s.seed, st.N, st.Batch, st.Seed)
	}
	if st.Processed < 0 || st.Processed > st.N {
		return fmt.Errorf("elastic: sampler position %d is not in [0, %d]", st.Processed, st.N)
	}
	s.epoch, s.base, s.steps = st.Epoch, st.Processed, 0
	return nil
}

// SamplerHandler is the Handler of a Sampler: a snapshot is its epoch and
// the group's position in it. Restore and Sync re-deal the rest of that
// epoch over the sampler's current rank and size.
type SamplerHandler struct {
	s     *Sampler
	saved *samplerState
}

// NewSamplerHandler returns the handler of s.
func NewSamplerHandler(s *Sampler) *SamplerHandler { return &SamplerHandler{s: s} }

// Save snapshots the epoch and the position.
func (h *SamplerHandler) Save() error {
	st := h.s.state()
	h.saved = &st
	return nil
}

// Restore returns to the snapshot's epoch and position; without one it does
// nothing.
func (h *SamplerHandler) Restore() error {
	if h.saved == nil {
		return nil
	}
	return h.s.setState(*h.saved)
}

// Sync sets every rank's epoch and position to rank 0's and snapshots them.
func (h *SamplerHandler) Sync(ctx context.Context, b Broadcaster) error { return syncCodec(ctx, h, b) }

// Encode returns the epoch and the group's position in it (Codec).
func (h *SamplerHandler) Encode() ([]byte, error) { return encodeSampler(h.s.state()), nil }

// Decode sets the epoch and position from b and re-deals the rest of the
// epoch over the sampler's current rank and size (Codec): a position
// written at another size resumes at this one. The dataset size, batch
// size and seed in b must be the sampler's.
func (h *SamplerHandler) Decode(b []byte) error {
	st, err := decodeSampler(b)
	if err != nil {
		return err
	}
	return h.s.setState(st)
}

func encodeSampler(st samplerState) []byte {
	var buf bytes.Buffer
	// A struct of ints cannot fail to encode.
	_ = gob.NewEncoder(&buf).Encode(st)
	return buf.Bytes()
}

func decodeSampler(b []byte) (samplerState, error) {
	var st samplerState
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&st); err != nil {
		return st, fmt.Errorf("elastic: decoding the sampler state: %w", err)
	}
	return st, nil
}
