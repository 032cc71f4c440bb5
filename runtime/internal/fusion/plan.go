package fusion

import (
	"slices"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// Fusible reports whether responses of type t may be fused (allreduce only;
// adasum, allgather, broadcast, alltoall, reducescatter, barrier, join and
// errors run one response at a time).
func Fusible(t wire.ResponseType) bool { return wire.RequestType(t) == wire.Allreduce }

// Bytes returns the payload of an allreduce-like response: its element
// counts times the element size.
func Bytes(r *wire.Response) int64 {
	var n int64
	for _, s := range r.Sizes {
		n += s
	}
	return n * int64(r.DType.Size())
}

func compatible(a, b *wire.Response) bool {
	return a.Type == b.Type && a.DType == b.DType && a.Op == b.Op && a.Prescale == b.Prescale &&
		a.Postscale == b.Postscale && slices.Equal(a.Devices, b.Devices)
}

// Planner fuses response lists. Its zero value is ready to use; the slices it
// returns stay valid until the next call to Plan.
type Planner struct {
	// MaxFused is the largest response, in bytes, that is fused with
	// others; larger ones run alone, straight from the caller's tensor,
	// which saves copying them in and out of the fusion buffer. Zero: no
	// limit beyond the threshold.
	MaxFused int64

	out     []wire.Response
	names   []string
	sizes   []int64
	shapes  [][]int64
	used    []bool
	pending []int
	src     []int // input indices of the outputs, in order
	srcEnd  []int // srcEnd[k]: end of output k's indices in src
}

// Sources returns the indices in the last Plan's input of the responses
// that output k was made of, in the order of its names (one index per
// input response; a response that held several names appears once).
func (p *Planner) Sources(k int) []int {
	start := 0
	if k > 0 {
		start = p.srcEnd[k-1]
	}
	return p.src[start:p.srcEnd[k]:p.srcEnd[k]]
}

// Plan returns the responses of in with fusible runs packed into responses
// of at most threshold bytes (a single tensor larger than the threshold, or
// than MaxFused, stays alone). A threshold of 0 disables fusion. The order
// of the output is deterministic: every rank given the same input plans the
// same output.
func (p *Planner) Plan(in []wire.Response, threshold int64) []wire.Response {
	p.out = p.out[:0]
	p.src, p.srcEnd = p.src[:0], p.srcEnd[:0]
	if threshold <= 0 {
		for i := range in {
			p.src = append(p.src, i)
			p.srcEnd = append(p.srcEnd, len(p.src))
		}
		return append(p.out, in...)
	}
	total := 0
	for i := range in {
		total += len(in[i].Names)
	}
	// Capacity for every name up front: sub-slices below never move.
	p.names = slices.Grow(p.names[:0], total)
	p.sizes = slices.Grow(p.sizes[:0], total)
	p.shapes = slices.Grow(p.shapes[:0], total)
	p.used = slices.Grow(p.used[:0], len(in))[:len(in)]
	clear(p.used)
	for i := range in {
		if p.used[i] {
			continue
		}
		p.used[i] = true
		head := &in[i]
		if !Fusible(head.Type) || len(head.Names) != 1 || p.alone(head) {
			p.out = append(p.out, *head)
			p.src = append(p.src, i)
			p.srcEnd = append(p.srcEnd, len(p.src))
			continue
		}
		n0 := len(p.names)
		p.add(head)
		p.src = append(p.src, i)
		size := Bytes(head)
		var skipped int64
		for j := i + 1; j < len(in); j++ {
			if p.used[j] {
				continue
			}
			r := &in[j]
			b := Bytes(r)
			if p.MaxFused > 0 && b > p.MaxFused {
				// Runs alone whatever happens: no reason to stop
				// looking ahead.
				continue
			}
			if len(r.Names) == 1 && size+b <= threshold && compatible(head, r) {
				p.used[j] = true
				p.add(r)
				p.src = append(p.src, j)
				size += b
				continue
			}
			// Look ahead past a response that does not fit this group
			// while the skipped bytes would still fit in one buffer.
			skipped += b
			if size+skipped > threshold {
				break
			}
		}
		f := *head
		f.Names = p.names[n0:len(p.names):len(p.names)]
		f.Sizes = p.sizes[n0:len(p.sizes):len(p.sizes)]
		f.Shapes = p.shapes[n0:len(p.shapes):len(p.shapes)]
		p.out = append(p.out, f)
		p.srcEnd = append(p.srcEnd, len(p.src))
	}
	return p.out
}

// alone reports whether r is too large to be fused under MaxFused.
func (p *Planner) alone(r *wire.Response) bool {
	return p.MaxFused > 0 && Bytes(r) > p.MaxFused
}

// add appends r's names, sizes and shapes to the group being built; one
// element at a time when r holds one tensor (the common case, and a
// variadic append of one element costs a copy call each).
func (p *Planner) add(r *wire.Response) {
	if len(r.Names) == 1 && len(r.Sizes) == 1 && len(r.Shapes) == 1 {
		p.names = append(p.names, r.Names[0])
		p.sizes = append(p.sizes, r.Sizes[0])
		p.shapes = append(p.shapes, r.Shapes[0])
		return
	}
	p.names = append(p.names, r.Names...)
	p.sizes = append(p.sizes, r.Sizes...)
	p.shapes = append(p.shapes, r.Shapes...)
}
