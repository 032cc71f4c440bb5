package tensor

import "github.com/x448/float16"

func float16ToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

func float32ToFloat16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

func bfloat16ToFloat32(h uint16) float32 { return math32frombits(uint32(h) << 16) }

// float32ToBFloat16 rounds to nearest even and keeps NaN a (quiet) NaN.
func float32ToBFloat16(f float32) uint16 {
	b := math32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Float16ToFloat32 converts src to float32 in dst (len(dst) must be at least len(src)).
func Float16ToFloat32(dst []float32, src []Float16Bits) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = float16ToFloat32(uint16(v))
	}
}

// Float32ToFloat16 rounds src to half precision in dst (nearest even).
func Float32ToFloat16(dst []Float16Bits, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = Float16Bits(float32ToFloat16(v))
	}
}

// BFloat16ToFloat32 converts src to float32 in dst.
func BFloat16ToFloat32(dst []float32, src []BFloat16Bits) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = bfloat16ToFloat32(uint16(v))
	}
}

// Float32ToBFloat16 rounds src to bfloat16 in dst (nearest even).
func Float32ToBFloat16(dst []BFloat16Bits, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = BFloat16Bits(float32ToBFloat16(v))
	}
}
