package optim

import (
	"errors"
	"fmt"
)

// minMaxEps is the ε of MinMaxUInt8's scale, 255/(max−min+ε): it keeps a
// constant chunk's scale finite.
const minMaxEps = 1e-7

// ErrNotFinite is returned (wrapped, with the index) by
// QuantizeMinMaxUint8 for a NaN or infinite input: 8 bits cannot carry
// it, and passing it through would poison the min and max of its whole
// chunk on every rank.
var ErrNotFinite = errors.New("optim: cannot quantize a value that is not finite")

// QuantizeMinMaxUint8 quantizes src into dst (len(dst) must equal
// len(src)) by MinMaxUInt8, as Bagua's ByteGrad does: min and max are
// src's extremes, and each value v becomes round((v−min)·scale) with
// scale = 255/(max−min+1e-7), rounded to nearest. An empty src gives
// min = max = 0. A NaN or infinite value is refused with ErrNotFinite
// and dst is left partly written.
func QuantizeMinMaxUint8(src []float32, dst []byte) (min, max float32, err error) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("optim: QuantizeMinMaxUint8: %d bytes for %d values", len(dst), len(src)))
	}
	if len(src) == 0 {
		return 0, 0, nil
	}
	min, max = src[0], src[0]
	for i, v := range src {
		if v-v != 0 { // NaN or ±Inf
			return 0, 0, fmt.Errorf("%w: element %d is %v", ErrNotFinite, i, v)
		}
		if v < min {
			min = v
		}
		if v > max {
			max = v
		}
	}
	scale := 255 / (float64(max) - float64(min) + minMaxEps)
	lo := float64(min)
	for i, v := range src {
		// (v−min)·scale lies in [0, 255·(max−min)/(max−min+ε)] ⊂ [0, 255]:
		// adding ½ and truncating rounds it to nearest without a clamp.
		dst[i] = byte((float64(v)-lo)*scale + 0.5)
	}
	return min, max, nil
}

// DequantizeMinMaxUint8 is QuantizeMinMaxUint8's inverse: each byte q
// becomes min + q/scale with the same scale (len(dst) must equal
// len(src)). A constant chunk (min = max) comes back exactly, ±0
// included, and any other value within (max−min)/255 of the original.
func DequantizeMinMaxUint8(src []byte, min, max float32, dst []float32) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("optim: DequantizeMinMaxUint8: %d values for %d bytes", len(dst), len(src)))
	}
	if min == max {
		for i := range dst {
			dst[i] = min
		}
		return
	}
	step := (float64(max) - float64(min) + minMaxEps) / 255
	lo := float64(min)
	for i, q := range src {
		dst[i] = float32(lo + float64(q)*step)
	}
}
