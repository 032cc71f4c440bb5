//go:build !amd64 || purego

package tensor

// Without assembly every kernel is the portable Go one.

// hasVector reports whether the vector kernels are in use.
const hasVector = false

func reduceF32(op ReduceOp, dst, src []float32) { reduceGo(op, dst, src) }
func reduceF64(op ReduceOp, dst, src []float64) { reduceGo(op, dst, src) }

func reduceF16(op ReduceOp, dst, src []uint16) {
	reduceHalfGo(op, dst, src, float16ToFloat32, float32ToFloat16)
}

func reduceBF16(op ReduceOp, dst, src []uint16) {
	reduceHalfGo(op, dst, src, bfloat16ToFloat32, float32ToBFloat16)
}

func scaleF32(s []float32, f float32) { scaleGo(s, f) }
func scaleF64(s []float64, f float64) { scaleGo(s, f) }

func scaleF16(s []uint16, f float32) { scaleHalfGo(s, f, float16ToFloat32, float32ToFloat16) }

func scaleBF16(s []uint16, f float32) { scaleHalfGo(s, f, bfloat16ToFloat32, float32ToBFloat16) }

func f16to32(dst []float32, src []uint16)   { f16to32Go(dst, src) }
func f32to16(dst []uint16, src []float32)   { f32to16Go(dst, src) }
func bf16to32(dst []float32, src []uint16)  { bf16to32Go(dst, src) }
func f32tobf16(dst []uint16, src []float32) { f32tobf16Go(dst, src) }

func reduceInt(dt DType, op ReduceOp, dst, src []byte) { reduceIntBytesGo(dt, op, dst, src) }
