package commtest

import (
	"bytes"
	"fmt"

	"github.com/gohorovod/gohorovod/tensor"
)

// The suite's values are small integers (or, for the bitwise reductions,
// bit patterns), so every dtype represents them exactly and every expected
// result can be computed in int64: integer dtypes wrap exactly as an int64
// truncated to their width does.

// filled returns a new tensor of the given shape whose element i is f(i).
func filled(dt tensor.DType, f func(i int) int64, shape ...int) *tensor.Tensor {
	t := tensor.New(dt, shape...)
	fill(t, f)
	return t
}

// fill sets element i of t to f(i), converted to t's dtype.
func fill(t *tensor.Tensor, f func(i int) int64) {
	if fillT, ok := fills[t.DType()]; ok {
		fillT(t, f)
		return
	}
	switch t.DType() {
	case tensor.Float16, tensor.BFloat16:
		tmp := make([]float32, t.Len())
		for i := range tmp {
			tmp[i] = float32(f(i))
		}
		if t.DType() == tensor.Float16 {
			tensor.Float32ToFloat16(tensor.View[tensor.Float16Bits](t), tmp)
		} else {
			tensor.Float32ToBFloat16(tensor.View[tensor.BFloat16Bits](t), tmp)
		}
	case tensor.Bool:
		// A value's parity is the bool; the sentinel stays a byte no bool
		// has, so that a collective that overwrites it is caught.
		s := t.Bytes()
		for i := range s {
			v := f(i)
			if v == sentinel {
				s[i] = sentinel
			} else {
				s[i] = byte(v & 1)
			}
		}
	default:
		panic(fmt.Sprintf("commtest: no fill for %v", t.DType()))
	}
}

// number is an element type that fill converts int64 values to.
type number interface {
	float32 | float64 | int8 | uint8 | int16 | uint16 | int32 | int64 | uint64
}

// fills and shows are fill and show for the dtypes whose elements are Go
// numbers.
var (
	fills = map[tensor.DType]func(*tensor.Tensor, func(int) int64){
		tensor.Float32: fillAs[float32], tensor.Float64: fillAs[float64],
		tensor.Int8: fillAs[int8], tensor.Uint8: fillAs[uint8],
		tensor.Int16: fillAs[int16], tensor.Uint16: fillAs[uint16],
		tensor.Int32: fillAs[int32], tensor.Int64: fillAs[int64], tensor.Uint64: fillAs[uint64],
	}
	shows = map[tensor.DType]func(*tensor.Tensor, int) string{
		tensor.Float32: showAs[float32], tensor.Float64: showAs[float64],
		tensor.Int8: showAs[int8], tensor.Uint8: showAs[uint8],
		tensor.Int16: showAs[int16], tensor.Uint16: showAs[uint16],
		tensor.Int32: showAs[int32], tensor.Int64: showAs[int64],
	}
)

// fillAs sets element i of t, whose elements are Ts, to f(i).
func fillAs[T number](t *tensor.Tensor, f func(i int) int64) {
	s := tensor.View[T](t)
	for i := range s {
		s[i] = T(f(i))
	}
}

// showAs returns element i of t, whose elements are Ts, as text.
func showAs[T number](t *tensor.Tensor, i int) string { return fmt.Sprint(tensor.View[T](t)[i]) }

// show returns element i of t as text.
func show(t *tensor.Tensor, i int) string {
	if showT, ok := shows[t.DType()]; ok {
		return showT(t, i)
	}
	switch t.DType() {
	case tensor.Float16:
		var out [1]float32
		tensor.Float16ToFloat32(out[:], tensor.View[tensor.Float16Bits](t)[i:i+1])
		return fmt.Sprint(out[0])
	case tensor.BFloat16:
		var out [1]float32
		tensor.BFloat16ToFloat32(out[:], tensor.View[tensor.BFloat16Bits](t)[i:i+1])
		return fmt.Sprint(out[0])
	case tensor.Uint64:
		return fmt.Sprintf("%#x", tensor.View[uint64](t)[i])
	case tensor.Bool:
		if b := t.Bytes()[i]; b > 1 {
			return fmt.Sprintf("byte %d", b)
		}
		return fmt.Sprint(t.Bytes()[i] == 1)
	}
	return "?"
}

// same compares got with want element by element and describes the first
// difference (and how many elements differ), or returns nil.
func same(what string, got, want *tensor.Tensor) error {
	if got.DType() != want.DType() || got.Len() != want.Len() {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	gb, wb := got.Bytes(), want.Bytes()
	if bytes.Equal(gb, wb) {
		return nil
	}
	esz := got.DType().Size()
	first, bad := -1, 0
	for i := 0; i < got.Len(); i++ {
		if !bytes.Equal(gb[i*esz:(i+1)*esz], wb[i*esz:(i+1)*esz]) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	return fmt.Errorf("%s: %d of %d elements wrong; element %d is %s, want %s",
		what, bad, got.Len(), first, show(got, first), show(want, first))
}

// signed reports whether the suite may use negative values for dt.
func signed(dt tensor.DType) bool {
	return dt != tensor.Uint8 && dt != tensor.Uint16 && dt != tensor.Uint64 && dt != tensor.Bool
}

// orLike reports whether op is a logical "or" on Bool (see tensor.Reduce).
func orLike(op tensor.ReduceOp) bool {
	return op == tensor.Sum || op == tensor.Max || op == tensor.BitOr
}

// bitStride is how far apart the bits of the bitwise cases are, so that they
// reach the high bytes of wide types.
func bitStride(dt tensor.DType) int { return dt.Size() }

// contribution is element i of rank r's input to a reduction with op in a
// group of n ranks: chosen so that every rank's contribution is visible in
// the result, the result depends on i, and it stays exact in every dtype
// (for up to 8 ranks).
func contribution(dt tensor.DType, op tensor.ReduceOp, r, n, i int) int64 {
	if dt == tensor.Bool {
		// One rank (i mod n+1) differs from the others, and no rank for
		// every (n+1)-th element: a missing or doubled rank shows.
		odd := int64(0)
		if i%(n+1) == r {
			odd = 1
		}
		if orLike(op) {
			return odd
		}
		return 1 - odd
	}
	switch op {
	case tensor.Sum:
		// A distinct power of two per rank (any missing or doubled rank
		// changes the sum) on top of a pattern that varies with i.
		p := int64(i % 11)
		if signed(dt) {
			p -= 5
		}
		return p + 1<<(r%5)
	case tensor.Product:
		// Rank i%n contributes 2, the others 1; a sign that depends on i
		// and r for the types that have one.
		v := int64(1)
		if r == i%n {
			v = 2
		}
		if signed(dt) && (i+r)%3 == 0 {
			v = -v
		}
		return v
	case tensor.Min, tensor.Max:
		// Distinct values per rank; which rank holds the extreme varies
		// with i.
		v := int64((r+i)%(2*n+1) - n)
		if !signed(dt) {
			v += int64(n)
		}
		return v
	case tensor.BitAnd:
		return ^(int64(1) << (((r + i) % 7) * bitStride(dt)))
	case tensor.BitOr:
		return int64(1) << (((r + i) % 7) * bitStride(dt))
	}
	panic(fmt.Sprintf("commtest: no values for %v", op))
}

// combine folds the contributions of ranks 0..n-1 to element i.
func combine(dt tensor.DType, op tensor.ReduceOp, n, i int) int64 {
	acc := contribution(dt, op, 0, n, i)
	for r := 1; r < n; r++ {
		v := contribution(dt, op, r, n, i)
		if dt == tensor.Bool {
			if orLike(op) {
				acc |= v
			} else {
				acc &= v
			}
			continue
		}
		switch op {
		case tensor.Sum:
			acc += v
		case tensor.Product:
			acc *= v
		case tensor.Min:
			acc = min(acc, v)
		case tensor.Max:
			acc = max(acc, v)
		case tensor.BitAnd:
			acc &= v
		case tensor.BitOr:
			acc |= v
		}
	}
	return acc
}

// tag is a value that identifies (rank, index) pairs, exact in every dtype:
// it lies in [0, 97) (or [-48, 49) for signed types).
func tag(dt tensor.DType, r, i int) int64 {
	v := int64((r*37 + i*11 + 5) % 97)
	if signed(dt) {
		v -= 48
	}
	return v
}

// sentinel marks receive-buffer elements that a collective must not touch;
// no tag takes this value.
const sentinel = 120
