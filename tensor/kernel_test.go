package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// The reference below works one element at a time with the simplest code
// that states the rule; the kernels must agree with it bit for bit (any NaN
// matches any NaN).

// refHalfToF32 and refF32ToHalf use an independent implementation.
func refHalfToF32(h uint16) float32 { return float16.Frombits(h).Float32() }
func refF32ToHalf(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

func refBF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// refF32ToBF16 picks the nearer of the two neighbouring bfloat16 values by
// exact float64 arithmetic, ties to the even one.
func refF32ToBF16(f float32) uint16 {
	if f != f {
		return 0x7fc0
	}
	b := math.Float32bits(f)
	lo := uint16(b >> 16) // truncation toward zero
	if uint32(lo)<<16 == b {
		return lo
	}
	hi := lo + 1 // the next value away from zero (may be infinity)
	x := math.Abs(float64(f))
	dl := x - math.Abs(float64(refBF16ToF32(lo)))
	hv := math.Abs(float64(refBF16ToF32(hi)))
	if math.IsInf(hv, 0) {
		hv = math.Ldexp(1, 128) // as if the exponent were unbounded (IEEE 754 overflow)
	}
	dh := hv - x
	switch {
	case dl < dh:
		return lo
	case dh < dl:
		return hi
	case lo&1 == 0:
		return lo
	}
	return hi
}

func refMin(a, b float64) float64 {
	switch {
	case a != a || b != b:
		return math.NaN()
	case a == 0 && b == 0:
		if math.Signbit(a) {
			return a
		}
		return b
	case a < b:
		return a
	}
	return b
}

func refMax(a, b float64) float64 {
	switch {
	case a != a || b != b:
		return math.NaN()
	case a == 0 && b == 0:
		if math.Signbit(a) {
			return b
		}
		return a
	case a > b:
		return a
	}
	return b
}

// refFloat combines in float64 and lets the caller round to its type; for
// float32 inputs one rounding of the exact float64 sum or product is the
// correctly rounded float32 result, and the same holds for half values.
func refFloat(op ReduceOp, a, b float64) float64 {
	switch op {
	case Sum:
		return a + b
	case Product:
		return a * b
	case Min:
		return refMin(a, b)
	case Max:
		return refMax(a, b)
	}
	panic("bad op")
}

func refInt[T integer](op ReduceOp, a, b T) T {
	switch op {
	case Sum:
		return a + b
	case Product:
		return a * b
	case Min:
		if b < a {
			return b
		}
		return a
	case Max:
		if b > a {
			return b
		}
		return a
	case BitAnd:
		return a & b
	case BitOr:
		return a | b
	}
	panic("bad op")
}

// refReduce returns op(dst, src) element by element, as new bytes.
func refReduce(dt DType, op ReduceOp, dst, src []byte) []byte {
	out := append([]byte(nil), dst...)
	le := binary.LittleEndian
	for i := 0; i < len(dst); i += dt.Size() {
		d, s, o := dst[i:], src[i:], out[i:]
		switch dt {
		case Float32:
			a, b := math.Float32frombits(le.Uint32(d)), math.Float32frombits(le.Uint32(s))
			le.PutUint32(o, math.Float32bits(float32(refFloat(op, float64(a), float64(b)))))
		case Float64:
			a, b := math.Float64frombits(le.Uint64(d)), math.Float64frombits(le.Uint64(s))
			var r float64
			switch op { // float64 has no wider type to round from
			case Sum:
				r = a + b
			case Product:
				r = a * b
			default:
				r = refFloat(op, a, b)
			}
			le.PutUint64(o, math.Float64bits(r))
		case Float16:
			a, b := refHalfToF32(le.Uint16(d)), refHalfToF32(le.Uint16(s))
			le.PutUint16(o, refF32ToHalf(float32(refFloat(op, float64(a), float64(b)))))
		case BFloat16:
			a, b := refBF16ToF32(le.Uint16(d)), refBF16ToF32(le.Uint16(s))
			le.PutUint16(o, refF32ToBF16(float32(refFloat(op, float64(a), float64(b)))))
		case Int8:
			o[0] = byte(refInt(op, int8(d[0]), int8(s[0])))
		case Uint8:
			o[0] = refInt(op, d[0], s[0])
		case Int32:
			le.PutUint32(o, uint32(refInt(op, int32(le.Uint32(d)), int32(le.Uint32(s)))))
		case Int64:
			le.PutUint64(o, uint64(refInt(op, int64(le.Uint64(d)), int64(le.Uint64(s)))))
		case Uint64:
			le.PutUint64(o, refInt(op, le.Uint64(d), le.Uint64(s)))
		case Int16:
			le.PutUint16(o, uint16(refInt(op, int16(le.Uint16(d)), int16(le.Uint16(s)))))
		case Uint16:
			le.PutUint16(o, refInt(op, le.Uint16(d), le.Uint16(s)))
		case Bool:
			o[0] = refBool(op, d[0], s[0])
		}
	}
	return out
}

// refBool is Reduce's Bool semantics spelt out: "or" for Sum and Max, "and"
// for Min and Product (a nonzero byte being true, the result being the
// larger or smaller byte), bitwise for BitAnd and BitOr.
func refBool(op ReduceOp, a, b byte) byte {
	switch op {
	case Sum, Max: // or: nonzero if either is
		return max(a, b)
	case Product, Min: // and: zero if either is
		return min(a, b)
	}
	return refInt(op, a, b)
}

// refScale returns buf scaled by f as Scale documents it.
func refScale(dt DType, buf []byte, f float64) []byte {
	out := append([]byte(nil), buf...)
	le := binary.LittleEndian
	for i := 0; i < len(buf); i += dt.Size() {
		b, o := buf[i:], out[i:]
		switch dt {
		case Float32:
			le.PutUint32(o, math.Float32bits(math.Float32frombits(le.Uint32(b))*float32(f)))
		case Float64:
			le.PutUint64(o, math.Float64bits(math.Float64frombits(le.Uint64(b))*f))
		case Float16:
			le.PutUint16(o, refF32ToHalf(refHalfToF32(le.Uint16(b))*float32(f)))
		case BFloat16:
			le.PutUint16(o, refF32ToBF16(refBF16ToF32(le.Uint16(b))*float32(f)))
		case Int8:
			o[0] = byte(int8(math.Trunc(float64(int8(b[0])) * f)))
		case Uint8:
			o[0] = uint8(math.Trunc(float64(b[0]) * f))
		case Int32:
			le.PutUint32(o, uint32(int32(math.Trunc(float64(int32(le.Uint32(b)))*f))))
		case Int64:
			le.PutUint64(o, uint64(int64(math.Trunc(float64(int64(le.Uint64(b)))*f))))
		case Uint64:
			le.PutUint64(o, uint64(math.Trunc(float64(le.Uint64(b))*f)))
		case Int16:
			le.PutUint16(o, uint16(int16(math.Trunc(float64(int16(le.Uint16(b)))*f))))
		case Uint16:
			le.PutUint16(o, uint16(math.Trunc(float64(le.Uint16(b))*f)))
		case Bool:
			if f == 0 || math.IsNaN(f) {
				o[0] = 0
			}
		}
	}
	return out
}

// sameElements reports the first element where got and want differ, NaN
// matching NaN for float types.
func sameElements(dt DType, got, want []byte) (int, bool) {
	le := binary.LittleEndian
	for i := 0; i < len(got); i += dt.Size() {
		g, w := got[i:i+dt.Size()], want[i:i+dt.Size()]
		if string(g) == string(w) {
			continue
		}
		var gn, wn bool
		switch dt {
		case Float32:
			gn, wn = isNaN32(le.Uint32(g)), isNaN32(le.Uint32(w))
		case Float64:
			gn, wn = math.IsNaN(math.Float64frombits(le.Uint64(g))), math.IsNaN(math.Float64frombits(le.Uint64(w)))
		case Float16:
			gn, wn = le.Uint16(g)&0x7fff > 0x7c00, le.Uint16(w)&0x7fff > 0x7c00
		case BFloat16:
			gn, wn = le.Uint16(g)&0x7fff > 0x7f80, le.Uint16(w)&0x7fff > 0x7f80
		}
		if !(gn && wn) {
			return i / dt.Size(), false
		}
	}
	return 0, true
}

// unsigned reports whether dt is an unsigned integer type.
func unsigned(dt DType) bool { return dt == Uint8 || dt == Uint16 || dt == Uint64 }

func isNaN32(b uint32) bool { return b&0x7fffffff > 0x7f800000 }

var specials64 = []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 3, -2.5, math.Inf(1), math.Inf(-1), math.NaN(),
	math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-40, -1e-42, 65504, 65520, -65536, 6e-8, 3e-8, 1e-5,
	math.MaxFloat64, math.SmallestNonzeroFloat64, 1e300, 1e-310, 1e38, 3.4e38}

// fillRandom writes n random elements of dt: a mix of ordinary values,
// special values and random bit patterns.
func fillRandom(r *rand.Rand, dt DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	le := binary.LittleEndian
	for i := 0; i < n; i++ {
		o := b[i*dt.Size():]
		var f float64
		kind := r.IntN(10)
		switch {
		case kind < 2:
			f = specials64[r.IntN(len(specials64))]
		default:
			f = r.NormFloat64() * math.Pow(2, float64(r.IntN(20)-10))
		}
		switch dt {
		case Float32:
			if kind == 2 {
				le.PutUint32(o, r.Uint32())
			} else {
				le.PutUint32(o, math.Float32bits(float32(f)))
			}
		case Float64:
			if kind == 2 {
				le.PutUint64(o, r.Uint64())
			} else {
				le.PutUint64(o, math.Float64bits(f))
			}
		case Float16:
			if kind <= 3 {
				le.PutUint16(o, uint16(r.Uint32()))
			} else {
				le.PutUint16(o, refF32ToHalf(float32(f)))
			}
		case BFloat16:
			if kind <= 3 {
				le.PutUint16(o, uint16(r.Uint32()))
			} else {
				le.PutUint16(o, refF32ToBF16(float32(f)))
			}
		case Bool:
			// Mostly valid bools, sometimes any byte (which counts as true).
			b[i] = byte(r.IntN(2))
			if kind == 2 {
				b[i] = byte(r.Uint32())
			}
		default:
			v := r.Uint64()
			if kind < 5 {
				v = uint64(r.IntN(21) - 10) // small values, so products and sums matter
			}
			for j := 0; j < dt.Size(); j++ {
				o[j] = byte(v >> (8 * j))
			}
		}
	}
	return b
}

// lengths cover empty input, the scalar tail alone, one vector block, the
// unrolled loop and every tail length after it.
var lengths = []int{0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 1031}

func TestReduceMatchesReference(t *testing.T) {
	forEachKernelPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, dt := range DTypes() {
			for _, op := range ReduceOps() {
				if !op.Supports(dt) {
					continue
				}
				for _, n := range lengths {
					// An odd byte offset checks that unaligned storage works.
					for _, off := range []int{0, 1} {
						dst := misalign(fillRandom(r, dt, n), off)
						src := misalign(fillRandom(r, dt, n), off)
						want := refReduce(dt, op, dst, src)
						Reduce(dt, op, dst, src)
						if i, ok := sameElements(dt, dst, want); !ok {
							sz := dt.Size()
							t.Fatalf("%v %v n=%d off=%d: element %d = % x, want % x (src % x)",
								dt, op, n, off, i, dst[i*sz:i*sz+sz], want[i*sz:i*sz+sz], src[i*sz:i*sz+sz])
						}
					}
				}
			}
		}
	})
}

// misalign returns a copy of b starting one byte into a fresh allocation
// when off is 1, so that the element storage is not naturally aligned.
func misalign(b []byte, off int) []byte {
	if off == 0 {
		return b
	}
	c := make([]byte, len(b)+1)[1:]
	copy(c, b)
	return c
}

func TestReduceEdgeCases(t *testing.T) {
	nan32 := float32(math.NaN())
	neg0 := float32(math.Copysign(0, -1))
	tests := []struct {
		name     string
		op       ReduceOp
		dst, src []float32
		check    func(got float32) bool
	}{
		{"min NaN in src", Min, []float32{1}, []float32{nan32}, isNaN},
		{"min NaN in dst", Min, []float32{nan32}, []float32{1}, isNaN},
		{"max NaN in src", Max, []float32{1}, []float32{nan32}, isNaN},
		{"max NaN in dst", Max, []float32{nan32}, []float32{-1}, isNaN},
		{"min -0 +0", Min, []float32{0}, []float32{neg0}, func(g float32) bool { return g == 0 && math.Signbit(float64(g)) }},
		{"max -0 +0", Max, []float32{neg0}, []float32{0}, func(g float32) bool { return g == 0 && !math.Signbit(float64(g)) }},
		{"sum inf -inf", Sum, []float32{float32(math.Inf(1))}, []float32{float32(math.Inf(-1))}, isNaN},
		{"sum overflow", Sum, []float32{math.MaxFloat32}, []float32{math.MaxFloat32}, func(g float32) bool { return math.IsInf(float64(g), 1) }},
		{"product 0 inf", Product, []float32{0}, []float32{float32(math.Inf(1))}, isNaN},
	}
	for _, tc := range tests {
		forEachKernelPath(t, func(t *testing.T) {
			// Repeat the pair across a vector-sized buffer so that both the
			// vector loop and the scalar tail see it.
			const n = 37
			dst, src := make([]float32, n), make([]float32, n)
			for i := range dst {
				dst[i], src[i] = tc.dst[0], tc.src[0]
			}
			Reduce(Float32, tc.op, asBytes(dst), asBytes(src))
			for i, g := range dst {
				if !tc.check(g) {
					t.Fatalf("%s: element %d = %v (bits %#x)", tc.name, i, g, math.Float32bits(g))
				}
			}
			// The same pair in float16, bfloat16 and float64.
			h, hs := make([]Float16Bits, n), make([]Float16Bits, n)
			bf, bfs := make([]BFloat16Bits, n), make([]BFloat16Bits, n)
			d64, s64 := make([]float64, n), make([]float64, n)
			for i := range h {
				h[i], hs[i] = MakeFloat16(tc.dst[0]), MakeFloat16(tc.src[0])
				bf[i], bfs[i] = MakeBFloat16(tc.dst[0]), MakeBFloat16(tc.src[0])
				d64[i], s64[i] = float64(tc.dst[0]), float64(tc.src[0])
			}
			Reduce(Float16, tc.op, asBytes(h), asBytes(hs))
			Reduce(BFloat16, tc.op, asBytes(bf), asBytes(bfs))
			Reduce(Float64, tc.op, asBytes(d64), asBytes(s64))
			if tc.name == "sum overflow" {
				return // the float32 maximum is already infinite in half
			}
			for i := range h {
				if !tc.check(h[i].Float32()) || !tc.check(bf[i].Float32()) || !tc.check(float32(d64[i])) {
					t.Fatalf("%s: element %d = %v (f16) %v (bf16) %v (f64)", tc.name, i, h[i].Float32(), bf[i].Float32(), d64[i])
				}
			}
		})
	}
}

func isNaN(f float32) bool { return f != f }

func TestReduceHalfRoundsOnce(t *testing.T) {
	// 2048 + 1 is a tie between 2048 and 2050 in half: nearest even is 2048.
	// 2050 + 1 rounds to 2052. Both need one rounding of the exact sum.
	d := []Float16Bits{MakeFloat16(2048), MakeFloat16(2050), MakeFloat16(65504)}
	s := []Float16Bits{MakeFloat16(1), MakeFloat16(1), MakeFloat16(16)}
	Reduce(Float16, Sum, asBytes(d), asBytes(s))
	want := []float32{2048, 2052, float32(math.Inf(1))}
	for i := range d {
		if d[i].Float32() != want[i] {
			t.Errorf("float16 sum %d = %v, want %v", i, d[i].Float32(), want[i])
		}
	}
	// bfloat16 has 8 significant bits: 256 + 1 ties to 256, 258 + 1 to 260.
	b := []BFloat16Bits{MakeBFloat16(256), MakeBFloat16(258)}
	bs := []BFloat16Bits{MakeBFloat16(1), MakeBFloat16(1)}
	Reduce(BFloat16, Sum, asBytes(b), asBytes(bs))
	if b[0].Float32() != 256 || b[1].Float32() != 260 {
		t.Errorf("bfloat16 sums = %v %v, want 256 260", b[0].Float32(), b[1].Float32())
	}
}

func TestScaleMatchesReference(t *testing.T) {
	forEachKernelPath(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, dt := range DTypes() {
			for _, f := range []float64{0.5, 1.0 / 3, -0.25, 0, 3, 1e-3} {
				if !dt.IsFloat() && (f > 1 || f < 0 && unsigned(dt)) {
					continue // out of the type's range: unspecified
				}
				for _, n := range lengths {
					buf := fillRandom(r, dt, n)
					want := refScale(dt, buf, f)
					Scale(dt, buf, f)
					if i, ok := sameElements(dt, buf, want); !ok {
						sz := dt.Size()
						t.Fatalf("%v scale %v n=%d: element %d = % x, want % x", dt, f, n, i, buf[i*sz:i*sz+sz], want[i*sz:i*sz+sz])
					}
				}
			}
		}
	})
}

func TestScaleIntegersTruncateTowardZero(t *testing.T) {
	tests := []struct {
		in   []int32
		f    float64
		want []int32
	}{
		{[]int32{7, -7, 1, -1, 0}, 0.5, []int32{3, -3, 0, 0, 0}},
		{[]int32{10, -10, 3}, 1.0 / 3, []int32{3, -3, 1}},
		{[]int32{5, -5}, 2, []int32{10, -10}},
	}
	for _, tc := range tests {
		got := append([]int32(nil), tc.in...)
		ScaleTensor(FromInt32(got), tc.f)
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%v * %v = %v, want %v", tc.in, tc.f, got, tc.want)
				break
			}
		}
	}
	u := []uint8{255, 3}
	Scale(Uint8, u, 0.5)
	if u[0] != 127 || u[1] != 1 {
		t.Errorf("uint8 scale = %v, want [127 1]", u)
	}
}

func TestKernelPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		msg  string
	}{
		{"length mismatch", func() { Reduce(Float32, Sum, make([]byte, 8), make([]byte, 4)) }, "into"},
		{"partial element", func() { Reduce(Float32, Sum, make([]byte, 6), make([]byte, 6)) }, "whole number"},
		{"band on float", func() { Reduce(Float32, BitAnd, make([]byte, 4), make([]byte, 4)) }, "not defined"},
		{"invalid dtype", func() { Reduce(Invalid, Sum, nil, nil) }, "not defined"},
		{"invalid op", func() { Reduce(Int32, ReduceOp(99), make([]byte, 4), make([]byte, 4)) }, "not defined"},
		{"scale partial", func() { Scale(Float64, make([]byte, 12), 2) }, "Scale"},
		{"scale invalid", func() { Scale(Invalid, nil, 2) }, "Scale"},
		{"f16 short dst", func() { Float16ToFloat32(make([]float32, 1), make([]Float16Bits, 2)) }, "shorter"},
		{"f16 short dst 2", func() { Float32ToFloat16(make([]Float16Bits, 1), make([]float32, 2)) }, "shorter"},
		{"bf16 short dst", func() { BFloat16ToFloat32(make([]float32, 1), make([]BFloat16Bits, 2)) }, "shorter"},
		{"bf16 short dst 2", func() { Float32ToBFloat16(make([]BFloat16Bits, 1), make([]float32, 2)) }, "shorter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				s, _ := r.(string)
				if r == nil || !strings.HasPrefix(s, "tensor: ") || !strings.Contains(s, tc.msg) {
					t.Fatalf("panic = %v, want a \"tensor: ...%s...\" message", r, tc.msg)
				}
			}()
			tc.f()
		})
	}
}

func TestReduceInto(t *testing.T) {
	a := FromFloat32([]float32{1, 2, 3})
	b := FromFloat32([]float32{10, 20, 30})
	if err := ReduceInto(a, b, Sum); err != nil {
		t.Fatal(err)
	}
	if got := a.Float32s(); got[0] != 11 || got[1] != 22 || got[2] != 33 {
		t.Fatalf("sum = %v", got)
	}
	tests := []struct {
		name     string
		dst, src *Tensor
		op       ReduceOp
		msg      string
	}{
		{"dtype", a, FromFloat64([]float64{1, 2, 3}), Sum, "float64 into float32"},
		{"count", a, FromFloat32([]float32{1}), Sum, "1 elements into 3"},
		{"op", a, b, BitOr, "not defined"},
		{"device", a, NewDevice(Float32, Device{Kind: GPU}, 1, 3), Sum, "device"},
	}
	for _, tc := range tests {
		err := ReduceInto(tc.dst, tc.src, tc.op)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.msg)
		}
	}
}

func TestHalfConversionsExhaustive(t *testing.T) {
	forEachKernelPath(t, func(t *testing.T) {
		all := make([]Float16Bits, 1<<16)
		allB := make([]BFloat16Bits, 1<<16)
		for i := range all {
			all[i], allB[i] = Float16Bits(i), BFloat16Bits(i)
		}
		f := make([]float32, len(all))
		Float16ToFloat32(f, all)
		back := make([]Float16Bits, len(all))
		Float32ToFloat16(back, f)
		for i, h := range all {
			want := refHalfToF32(uint16(h))
			nan := uint16(h)&0x7fff > 0x7c00
			if nan {
				if !isNaN(f[i]) || math.Signbit(float64(f[i])) != (h&0x8000 != 0) || uint16(back[i]) != uint16(h)|0x200 {
					t.Fatalf("float16 NaN %#04x -> %#08x -> %#04x", h, math.Float32bits(f[i]), back[i])
				}
				continue
			}
			if math.Float32bits(f[i]) != math.Float32bits(want) {
				t.Fatalf("float16 %#04x -> %v, want %v", h, f[i], want)
			}
			if back[i] != h {
				t.Fatalf("float16 %#04x round trip gives %#04x", h, back[i])
			}
			if h.Float32() != f[i] || MakeFloat16(f[i]) != h {
				t.Fatalf("scalar float16 conversions of %#04x disagree", h)
			}
		}
		BFloat16ToFloat32(f, allB)
		backB := make([]BFloat16Bits, len(allB))
		Float32ToBFloat16(backB, f)
		for i, h := range allB {
			if math.Float32bits(f[i]) != uint32(h)<<16 {
				t.Fatalf("bfloat16 %#04x -> %#08x", h, math.Float32bits(f[i]))
			}
			want := h
			if h&0x7fff > 0x7f80 {
				want |= 0x40 // NaN comes back quiet
			}
			if backB[i] != want {
				t.Fatalf("bfloat16 %#04x round trip gives %#04x", h, backB[i])
			}
		}
	})
}

// float32Sample returns float32 bit patterns that stress rounding: a sweep
// over the whole space, every half and bfloat16 value with its neighbours,
// the midpoints between neighbouring half values and their neighbours.
func float32Sample() []float32 {
	var out []float32
	add := func(b uint32) {
		for _, d := range []uint32{0, 1, ^uint32(0)} {
			out = append(out, math.Float32frombits(b+d))
		}
	}
	for b := uint64(0); b < 1<<32; b += 65521 {
		add(uint32(b))
	}
	for h := 0; h < 1<<16; h++ {
		f := refHalfToF32(uint16(h))
		add(math.Float32bits(f))
		if next := refHalfToF32(uint16(h + 1)); h&0x7fff < 0x7bff {
			add(math.Float32bits(float32((float64(f) + float64(next)) / 2)))
		}
		add(uint32(h) << 16)
		add(uint32(h)<<16 | 0x8000)
	}
	return out
}

func TestFloat32ToHalfRounding(t *testing.T) {
	src := float32Sample()
	forEachKernelPath(t, func(t *testing.T) {
		h := make([]Float16Bits, len(src))
		Float32ToFloat16(h, src)
		b := make([]BFloat16Bits, len(src))
		Float32ToBFloat16(b, src)
		for i, f := range src {
			if isNaN(f) {
				if h[i]&0x7fff <= 0x7c00 || b[i]&0x7fff <= 0x7f80 {
					t.Fatalf("NaN %#08x -> %#04x, %#04x", math.Float32bits(f), h[i], b[i])
				}
				continue
			}
			if want := refF32ToHalf(f); uint16(h[i]) != want {
				t.Fatalf("float32 %v (%#08x) -> float16 %#04x, want %#04x", f, math.Float32bits(f), h[i], want)
			}
			if want := refF32ToBF16(f); uint16(b[i]) != want {
				t.Fatalf("float32 %v (%#08x) -> bfloat16 %#04x, want %#04x", f, math.Float32bits(f), b[i], want)
			}
		}
	})
}

func TestHalfConversionsKnownValues(t *testing.T) {
	tests := []struct {
		f    float32
		h    uint16
		bf   uint16
		name string
	}{
		{1, 0x3c00, 0x3f80, "one"},
		{-2, 0xc000, 0xc000, "minus two"},
		{65504, 0x7bff, 0x4780, "largest half"},
		{65520, 0x7c00, 0x4780, "rounds to inf"},
		{float32(math.Inf(-1)), 0xfc00, 0xff80, "-inf"},
		{5.960464477539063e-08, 0x0001, 0x3380, "smallest subnormal half"},
		{2.9802322387695312e-08, 0x0000, 0x3300, "half of it ties to zero"},
		{6.103515625e-05, 0x0400, 0x3880, "smallest normal half"},
		{1.00048828125, 0x3c00, 0x3f80, "tie to even (down)"},
		{1.00146484375, 0x3c02, 0x3f80, "tie to even (up)"},
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000, "-0"},
		{1e-45, 0x0000, 0x0000, "float32 subnormal"},
	}
	for _, tc := range tests {
		if got := MakeFloat16(tc.f); uint16(got) != tc.h {
			t.Errorf("%s: MakeFloat16(%v) = %#04x, want %#04x", tc.name, tc.f, got, tc.h)
		}
		if got := MakeBFloat16(tc.f); uint16(got) != tc.bf {
			t.Errorf("%s: MakeBFloat16(%v) = %#04x, want %#04x", tc.name, tc.f, got, tc.bf)
		}
	}
}

func TestDTypeOpNames(t *testing.T) {
	for _, dt := range DTypes() {
		got, err := ParseDType(dt.String())
		if err != nil || got != dt {
			t.Errorf("ParseDType(%q) = %v, %v", dt.String(), got, err)
		}
	}
	if _, err := ParseDType("float8"); err == nil {
		t.Error("ParseDType(float8) succeeded")
	}
	if s := fmt.Sprint(ReduceOps()); s != "[Sum Min Max Product BitAnd BitOr]" {
		t.Errorf("ReduceOps = %s", s)
	}
}

// FuzzReduce checks Reduce and Scale against the reference on arbitrary
// bytes: every bit pattern of every dtype, any length.
func FuzzReduce(f *testing.F) {
	f.Add(uint8(Float32), uint8(Sum), []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123"), 0.5)
	f.Add(uint8(Float16), uint8(Max), []byte{0x00, 0x7e, 0x01, 0x80, 0xff, 0x7b, 0x00, 0x3c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}, -3.0)
	f.Add(uint8(BFloat16), uint8(Product), []byte("\x80\x7f\x81\x7f\x00\x00\x01\x00abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"), 1e-3)
	f.Add(uint8(Int8), uint8(Min), []byte("\x80\x7f\xff\x00 some bytes for a full vector of int8 values, twice over........"), 0.25)
	f.Fuzz(func(t *testing.T, d, o uint8, data []byte, factor float64) {
		dt, op := DType(d%uint8(numDTypes-1)+1), ReduceOp(o%uint8(numReduceOps))
		if !op.Supports(dt) {
			return
		}
		half := len(data) / 2 / dt.Size() * dt.Size()
		dst := append([]byte(nil), data[:half]...)
		src := append([]byte(nil), data[half:2*half]...)
		want := refReduce(dt, op, dst, src)
		Reduce(dt, op, dst, src)
		if i, ok := sameElements(dt, dst, want); !ok {
			t.Fatalf("%v %v: element %d differs: got % x want % x", dt, op, i, dst, want)
		}
		if !dt.IsFloat() && dt != Bool && (factor < -1 || factor >= 1 || factor != factor || factor < 0 && unsigned(dt)) {
			return // out of range: unspecified (and 1 leaves 64-bit values unrounded)
		}
		want = refScale(dt, src, factor)
		Scale(dt, src, factor)
		if i, ok := sameElements(dt, src, want); !ok {
			t.Fatalf("%v scale %v: element %d differs: got % x want % x", dt, factor, i, src, want)
		}
	})
}
