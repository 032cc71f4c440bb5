package optim

import (
	"runtime"
	"sync"

	"github.com/gohorovod/gohorovod/tensor"
)

// minChunk is the fewest elements (256 KiB of float32) that one goroutine
// of a step updates: smaller steps run inline, on the calling goroutine.
const minChunk = 64 << 10

// forRanges splits the elements of all parameters of a step, lens[i] of
// parameter i (0 skips it), into contiguous chunks of at least minChunk
// elements, at most one per GOMAXPROCS, and calls fn(i, lo, hi) for every
// piece [lo, hi) of parameter i in a chunk. Chunks run on their own
// goroutines and forRanges returns when all are done; a chunk may span
// parameters and a parameter may span chunks, so one step over many small
// tensors uses every core as well as one over a single large tensor.
func forRanges(lens []int, fn func(i, lo, hi int)) {
	total := 0
	for _, n := range lens {
		total += n
	}
	if total == 0 {
		return
	}
	workers := min(runtime.GOMAXPROCS(0), (total+minChunk-1)/minChunk)
	if workers <= 1 {
		rangeOf(lens, 0, total, fn)
		return
	}
	chunk := (total + workers - 1) / workers
	var wg sync.WaitGroup
	for start := 0; start < total; start += chunk {
		end := min(start+chunk, total)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rangeOf(lens, start, end, fn)
		}()
	}
	wg.Wait()
}

// rangeOf calls fn for the pieces of the parameters that fall in the global
// element range [start, end) (parameters laid end to end in order).
func rangeOf(lens []int, start, end int, fn func(i, lo, hi int)) {
	off := 0
	for i, n := range lens {
		if off >= end {
			return
		}
		if lo, hi := max(start-off, 0), min(end-off, n); lo < hi {
			fn(i, lo, hi)
		}
		off += n
	}
}

// f32Param holds the float32 views of one parameter: value, gradient and
// the named state buffers.
type f32Param struct {
	v, g []float32
	bufs [][]float32
}

// stepF32 runs fn over the element ranges of every float32 parameter, with
// the state buffers named by slots, spread over the cores (see forRanges).
// Parameters of other types are left to the caller.
func (c *core) stepF32(slots []string, fn func(p *f32Param, lo, hi int)) {
	ps := make([]f32Param, len(c.params))
	lens := make([]int, len(c.params))
	for i, p := range c.params {
		if p.Value.DType() != tensor.Float32 {
			continue
		}
		v, g, bufs := views[float32](c, i, slots...)
		ps[i] = f32Param{v: v, g: g, bufs: bufs}
		lens[i] = len(v)
	}
	forRanges(lens, func(i, lo, hi int) { fn(&ps[i], lo, hi) })
}

// part returns s[lo:hi], or nil for a nil s.
func part(s []float32, lo, hi int) []float32 {
	if s == nil {
		return nil
	}
	return s[lo:hi]
}
