package optim

import "fmt"

// quantizeEpsilon keeps MinMaxUInt8's scale finite on constant chunks.
const quantizeEpsilon = 1e-7

// QuantizeMinMaxUint8 quantizes src to 8 bits into dst (len(src) bytes),
// Bagua's MinMaxUInt8: with min and max the extremes of src and scale =
// 255/(max−min+1e-7), element x becomes round((x−min)·scale), rounded to
// nearest, in [0, 255]. DequantizeMinMaxUint8 with the min and max it
// returns gives each element back within (max−min+1e-7)/255 (half a step
// is the rounding; the rest covers float32 arithmetic), a constant chunk
// exactly, and +0 and −0 as a zero of min's sign. NaN and ±Inf have no
// place on the scale: they are refused with an error (dst is then
// undefined), as are a range max−min beyond float32 and a dst of the wrong
// length. An empty src gives min = max = 0.
func QuantizeMinMaxUint8(src []float32, dst []byte) (min, max float32, err error) {
	if len(dst) != len(src) {
		return 0, 0, fmt.Errorf("optim: quantize: %d bytes for %d elements", len(dst), len(src))
	}
	if len(src) == 0 {
		return 0, 0, nil
	}
	min, max = src[0], src[0]
	for i, x := range src {
		if x-x != 0 { // NaN or ±Inf
			return 0, 0, fmt.Errorf("optim: quantize: element %d is %v; only finite values can be quantized", i, x)
		}
		if x < min {
			min = x
		}
		if x > max {
			max = x
		}
	}
	if d := max - min; d-d != 0 {
		return 0, 0, fmt.Errorf("optim: quantize: the range [%v, %v] overflows float32", min, max)
	}
	scale := quantizeScale(min, max)
	for i, x := range src {
		// Rounded to nearest: the value is at least 0 (up to rounding,
		// which the truncation to 0 covers).
		q := int((x-min)*scale + 0.5)
		if q > 255 {
			q = 255
		}
		dst[i] = byte(max0(q))
	}
	return min, max, nil
}

// DequantizeMinMaxUint8 reverses QuantizeMinMaxUint8: dst[i] = src[i]/scale
// + min, with the scale the quantizer used. It panics if dst and src differ
// in length.
func DequantizeMinMaxUint8(src []byte, min, max float32, dst []float32) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("optim: dequantize: %d elements for %d bytes", len(dst), len(src)))
	}
	scale := quantizeScale(min, max)
	for i, q := range src {
		dst[i] = float32(q)/scale + min
	}
}

func max0(q int) int {
	if q < 0 {
		return 0
	}
	return q
}

func quantizeScale(min, max float32) float32 {
	return 255 / (max - min + quantizeEpsilon)
}
