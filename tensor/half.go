package tensor

import "math"

// Half-precision conversions by bit manipulation, without tables or
// branches on the common (normal) path. The amd64 kernels use the F16C
// instructions instead; both give identical bits for every non-NaN value,
// and both turn a NaN into a quiet NaN that keeps the sign and the top
// mantissa bits.

// float16ToFloat32 widens one binary16 value exactly.
func float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	em := uint32(h&0x7fff) << 13 // exponent and mantissa in binary32 position
	exp := em & 0x0f800000
	switch exp {
	case 0x0f800000: // inf or NaN: exponent all ones
		return math.Float32frombits(sign | em | 0x7f800000)
	case 0: // zero or subnormal: let the FPU normalise it
		// em is the mantissa m·2^13 with a zero exponent field. Adding
		// exponent 113 (2^-14) and subtracting 2^-14 leaves m·2^-24 exactly.
		f := math.Float32frombits(em|113<<23) - math.Float32frombits(113<<23)
		return math.Float32frombits(math.Float32bits(f) | sign)
	}
	return math.Float32frombits(sign | (em + (127-15)<<23))
}

// float32ToFloat16 rounds one binary32 value to binary16, to nearest even,
// with overflow to infinity and gradual underflow to subnormals.
func float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	b &= 0x7fffffff
	switch {
	case b > 0x7f800000: // NaN: quiet it, keep the top payload bits
		return sign | 0x7e00 | uint16(b>>13)&0x3ff
	case b >= 0x47800000: // >= 65536 (or inf): beyond the largest half after rounding
		return sign | 0x7c00
	case b < 0x38800000: // below 2^-14: subnormal half or zero
		// Adding 0.5 (2^-1) puts the value's 2^-24 units in the low mantissa
		// bits of the sum, and the FPU rounds to nearest even on the way.
		s := math.Float32frombits(b) + 0.5
		return sign | uint16(math.Float32bits(s)-0x3f000000)
	}
	// Normal: rebias the exponent and round the 13 dropped bits to nearest
	// even. A carry out of the mantissa bumps the exponent, which is right,
	// and 65520 and above carry into the infinity encoding.
	odd := (b >> 13) & 1
	b -= (127 - 15) << 23
	b += 0xfff + odd
	return sign | uint16(b>>13)
}

// bfloat16ToFloat32 widens one bfloat16 value exactly.
func bfloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// float32ToBFloat16 rounds to nearest even and keeps NaN a (quiet) NaN.
func float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Float16ToFloat32 converts src to float32 in dst. Every half value,
// subnormals, infinities and NaN included, converts exactly. It panics if dst
// is shorter than src.
func Float16ToFloat32(dst []float32, src []Float16Bits) {
	if len(dst) < len(src) {
		panic("tensor: Float16ToFloat32 destination shorter than source")
	}
	f16to32(dst[:len(src)], asU16(src))
}

// Float32ToFloat16 rounds src to half precision in dst (nearest even;
// overflow gives infinity, tiny values become subnormals or zero, NaN stays
// NaN). It panics if dst is shorter than src.
func Float32ToFloat16(dst []Float16Bits, src []float32) {
	if len(dst) < len(src) {
		panic("tensor: Float32ToFloat16 destination shorter than source")
	}
	f32to16(asU16(dst[:len(src)]), src)
}

// BFloat16ToFloat32 converts src to float32 in dst (exactly). It panics if
// dst is shorter than src.
func BFloat16ToFloat32(dst []float32, src []BFloat16Bits) {
	if len(dst) < len(src) {
		panic("tensor: BFloat16ToFloat32 destination shorter than source")
	}
	bf16to32(dst[:len(src)], asU16(src))
}

// Float32ToBFloat16 rounds src to bfloat16 in dst (nearest even; NaN stays
// NaN). It panics if dst is shorter than src.
func Float32ToBFloat16(dst []BFloat16Bits, src []float32) {
	if len(dst) < len(src) {
		panic("tensor: Float32ToBFloat16 destination shorter than source")
	}
	f32tobf16(asU16(dst[:len(src)]), src)
}

// MakeFloat16 returns the half-precision value nearest to f.
func MakeFloat16(f float32) Float16Bits { return Float16Bits(float32ToFloat16(f)) }

// Float32 returns the value of h as a float32 (exact).
func (h Float16Bits) Float32() float32 { return float16ToFloat32(uint16(h)) }

// MakeBFloat16 returns the bfloat16 value nearest to f.
func MakeBFloat16(f float32) BFloat16Bits { return BFloat16Bits(float32ToBFloat16(f)) }

// Float32 returns the value of h as a float32 (exact).
func (h BFloat16Bits) Float32() float32 { return bfloat16ToFloat32(uint16(h)) }

func asU16[T ~uint16](s []T) []uint16 { return fromBytes[uint16](asBytes(s)) }

func f16to32Go(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = float16ToFloat32(v)
	}
}

func f32to16Go(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = float32ToFloat16(v)
	}
}

func bf16to32Go(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = bfloat16ToFloat32(v)
	}
}

func f32tobf16Go(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = float32ToBFloat16(v)
	}
}
