package optim

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gohorovod/gohorovod/tensor"
)

// chunkHeader is the size of a quantized chunk's header: its min and max,
// float32, little-endian. A chunk whose values could not be quantized
// (NaN or Inf) travels with min NaN and max the rank where it failed, so
// that every rank learns which.
const chunkHeader = 8

// putChunk quantizes src into dst (chunkHeader+len(src) bytes). On a
// non-finite value it writes the failure header naming rank and returns
// the error; residual, when not nil, receives src minus what the
// receivers will decode.
func putChunk(src []float32, dst []byte, rank int, residual []float32) error {
	lo, hi, err := QuantizeMinMaxUint8(src, dst[chunkHeader:])
	if err != nil {
		lo, hi = float32(math.NaN()), float32(rank)
		clear(dst[chunkHeader:])
	}
	binary.LittleEndian.PutUint32(dst, math.Float32bits(lo))
	binary.LittleEndian.PutUint32(dst[4:], math.Float32bits(hi))
	if residual != nil && err == nil {
		DequantizeMinMaxUint8(dst[chunkHeader:], lo, hi, residual)
		for i, v := range src {
			residual[i] = v - residual[i]
		}
	}
	return err
}

// getChunk decodes a chunk written by putChunk into dst
// (len(src)-chunkHeader values); a failure header gives an error naming
// the rank where the values were not finite.
func getChunk(src []byte, dst []float32) error {
	lo := math.Float32frombits(binary.LittleEndian.Uint32(src))
	hi := math.Float32frombits(binary.LittleEndian.Uint32(src[4:]))
	if math.IsNaN(float64(lo)) {
		return fmt.Errorf("%w: on rank %d", ErrNotFinite, int(hi))
	}
	DequantizeMinMaxUint8(src[chunkHeader:], lo, hi, dst)
	return nil
}

// byteGradPlan is how a flat vector of n values travels through the
// ByteGrad exchange among size ranks: chunk r is ShardRange(n, size, r),
// sent to rank r with its header.
type byteGradPlan struct {
	n, size, rank int
}

// chunk returns chunk r's range.
func (p byteGradPlan) chunk(r int) (lo, hi int) { return ShardRange(p.n, p.size, r) }

// splits returns the bytes sent to each rank: its chunk and a header.
func (p byteGradPlan) splits() []int {
	s := make([]int, p.size)
	for r := range s {
		lo, hi := p.chunk(r)
		s[r] = chunkHeader + hi - lo
	}
	return s
}

// encode quantizes each chunk of buf into wire (n + size·chunkHeader
// bytes), in rank order; residual (n values or nil) receives the
// quantization error. The first failure is returned after every chunk is
// written, so that the exchange still runs and carries it.
func (p byteGradPlan) encode(buf []float32, wire []byte, residual []float32) error {
	var first error
	off := 0
	for r := range p.size {
		lo, hi := p.chunk(r)
		var res []float32
		if residual != nil {
			res = residual[lo:hi]
		}
		if err := putChunk(buf[lo:hi], wire[off:off+chunkHeader+hi-lo], p.rank, res); err != nil && first == nil {
			first = err
		}
		off += chunkHeader + hi - lo
	}
	return first
}

// reduce decodes the size copies of this rank's chunk in got (one from
// each rank, in rank order), sums them, multiplies by scale, adds the
// owner's residual from the last step (fb.ownerIn, when not nil) and
// quantizes the result into out (chunkHeader + the chunk's length),
// leaving the new quantization error in fb.ownerOut (when fb is not nil).
func (p byteGradPlan) reduce(got []byte, scale float64, out []byte, fb *byteGradFeedback) error {
	lo, hi := p.chunk(p.rank)
	m := hi - lo
	sum := make([]float64, m)
	tmp := make([]float32, m)
	var first error
	for r := range p.size {
		if err := getChunk(got[r*(chunkHeader+m):(r+1)*(chunkHeader+m)], tmp); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		for i, v := range tmp {
			sum[i] += float64(v)
		}
	}
	for i, v := range sum {
		tmp[i] = float32(v * scale)
	}
	var res []float32
	if fb != nil {
		if fb.ownerIn != nil {
			for i, e := range fb.ownerIn[lo:hi] {
				tmp[i] += e
			}
		}
		res = fb.ownerOut[lo:hi]
	}
	if first != nil {
		// Pass the failure on to every rank.
		binary.LittleEndian.PutUint32(out, math.Float32bits(float32(math.NaN())))
		binary.LittleEndian.PutUint32(out[4:], math.Float32bits(float32(failedRank(got, m, p.size))))
		return nil
	}
	return putChunk(tmp, out, p.rank, res)
}

// failedRank returns the rank named by the first failure header among
// the size chunks of m values in got.
func failedRank(got []byte, m, size int) int {
	for r := range size {
		c := got[r*(chunkHeader+m):]
		if math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(c)))) {
			return int(math.Float32frombits(binary.LittleEndian.Uint32(c[4:])))
		}
	}
	return -1
}

// decode writes the gathered chunks (every rank's reduced chunk, in rank
// order) into buf.
func (p byteGradPlan) decode(all []byte, buf []float32) error {
	off := 0
	for r := range p.size {
		lo, hi := p.chunk(r)
		if err := getChunk(all[off:off+chunkHeader+hi-lo], buf[lo:hi]); err != nil {
			return err
		}
		off += chunkHeader + hi - lo
	}
	return nil
}

// byteGradFeedback is the error feedback of one vector's exchange: the
// caller adds the last step's local residual to the vector; the exchange
// writes this step's local residual (what quantizing this rank's vector
// lost) into local, adds ownerIn (the last step's owner residual, or nil)
// to the mean of the chunk this rank owns before quantizing it again, and
// writes what that lost into ownerOut's range of the chunk. All three are
// as long as the vector; ownerOut is zero outside this rank's chunk.
type byteGradFeedback struct {
	local, ownerIn, ownerOut []float32
}

// byteGradExchange replaces buf, on every rank, by scale times the sum
// over ranks of their buf, through ByteGrad's 8-bit exchange under name:
// each chunk quantized and sent to its owner (alltoall), summed there,
// re-quantized and gathered by every rank (allgather); fb (or nil) is the
// error feedback. Every rank runs both collectives even when its values
// are not finite; then every rank returns ErrNotFinite naming the rank.
func byteGradExchange(ctx context.Context, c Collectives, name string, buf []float32, scale float64, fb *byteGradFeedback) error {
	ac, gc, rank, err := exchangeOf(c)
	if err != nil {
		return err
	}
	p := byteGradPlan{n: len(buf), size: c.Size(), rank: rank}
	wire := tensor.New(tensor.Uint8, len(buf)+p.size*chunkHeader)
	var local []float32
	if fb != nil {
		local = fb.local
		clear(fb.ownerOut)
	}
	encErr := p.encode(buf, wire.Bytes(), local)
	got, _, err := ac.Alltoall(ctx, wire, p.splits(), name+".a2a")
	if err != nil {
		return err
	}
	lo, hi := p.chunk(rank)
	mine := tensor.New(tensor.Uint8, chunkHeader+hi-lo)
	if err := p.reduce(got.Bytes(), scale, mine.Bytes(), fb); err != nil {
		encErr = err
	}
	all, err := gc.Allgather(ctx, mine, name+".ag")
	if err != nil {
		return err
	}
	if err := p.decode(all.Bytes(), buf); err != nil {
		return fmt.Errorf("optim: %s: %w", name, err)
	}
	if encErr != nil {
		return fmt.Errorf("optim: %s: %w", name, encErr)
	}
	return nil
}

// exchangeOf returns c as the collectives the 8-bit exchange needs, and
// this rank, or an error saying what c lacks.
func exchangeOf(c Collectives) (AlltoallCollectives, GatherCollectives, int, error) {
	ac, ok1 := c.(AlltoallCollectives)
	gc, ok2 := c.(GatherCollectives)
	rank, ok3 := rankOf(c)
	if !ok1 || !ok2 || !ok3 || rank < 0 {
		return nil, nil, 0, fmt.Errorf("optim: the 8-bit exchange needs a Collectives with Alltoall, Allgather and Rank (FromRuntime's), not %T", c)
	}
	return ac, gc, rank, nil
}
