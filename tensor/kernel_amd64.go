//go:build amd64 && !purego

package tensor

// On amd64 the float kernels run 256-bit AVX2 loops (kernel_amd64.s) when
// the CPU and the operating system support AVX2 and F16C; the Go kernels
// finish the tail (fewer than 8 elements) and serve older CPUs.

// hasVector reports whether the vector kernels are in use.
var hasVector = detectVector()

func cpuid(eax, ecx uint32) (a, b, c, d uint32)
func xgetbv0() uint32

func detectVector() bool {
	max, _, _, _ := cpuid(0, 0)
	if max < 7 {
		return false
	}
	_, _, c1, _ := cpuid(1, 0)
	const (
		osxsave = 1 << 27
		avx     = 1 << 28
		f16c    = 1 << 29
	)
	if c1&(osxsave|avx|f16c) != osxsave|avx|f16c {
		return false
	}
	if xgetbv0()&6 != 6 { // the OS saves XMM and YMM state
		return false
	}
	_, b7, _, _ := cpuid(7, 0)
	return b7&(1<<5) != 0 // AVX2
}

// The vector kernels process n elements, n a multiple of 8 (float32,
// float16, bfloat16) or 4 (float64).

//go:noescape
func addF32(dst, src *float32, n int)

//go:noescape
func mulF32(dst, src *float32, n int)

//go:noescape
func minF32(dst, src *float32, n int)

//go:noescape
func maxF32(dst, src *float32, n int)

//go:noescape
func scalF32(dst *float32, n int, f float32)

//go:noescape
func addF64(dst, src *float64, n int)

//go:noescape
func mulF64(dst, src *float64, n int)

//go:noescape
func minF64(dst, src *float64, n int)

//go:noescape
func maxF64(dst, src *float64, n int)

//go:noescape
func scalF64(dst *float64, n int, f float64)

//go:noescape
func addF16(dst, src *uint16, n int)

//go:noescape
func mulF16(dst, src *uint16, n int)

//go:noescape
func minF16(dst, src *uint16, n int)

//go:noescape
func maxF16(dst, src *uint16, n int)

//go:noescape
func scalF16(dst *uint16, n int, f float32)

//go:noescape
func addBF16(dst, src *uint16, n int)

//go:noescape
func mulBF16(dst, src *uint16, n int)

//go:noescape
func minBF16(dst, src *uint16, n int)

//go:noescape
func maxBF16(dst, src *uint16, n int)

//go:noescape
func scalBF16(dst *uint16, n int, f float32)

//go:noescape
func cvtF16F32(dst *float32, src *uint16, n int)

//go:noescape
func cvtF32F16(dst *uint16, src *float32, n int)

//go:noescape
func cvtBF16F32(dst *float32, src *uint16, n int)

//go:noescape
func cvtF32BF16(dst *uint16, src *float32, n int)

type binKernels[T any] struct{ add, mul, min, max func(dst, src *T, n int) }

var (
	kernF32  = binKernels[float32]{addF32, mulF32, minF32, maxF32}
	kernF64  = binKernels[float64]{addF64, mulF64, minF64, maxF64}
	kernF16  = binKernels[uint16]{addF16, mulF16, minF16, maxF16}
	kernBF16 = binKernels[uint16]{addBF16, mulBF16, minBF16, maxBF16}
)

// vector runs the vector kernel for op on the longest prefix that is a
// multiple of block elements and returns the number of elements done.
func (k *binKernels[T]) vector(op ReduceOp, dst, src []T, block int) int {
	n := len(dst) &^ (block - 1)
	if !hasVector || n == 0 {
		return 0
	}
	src = src[:len(dst)]
	var f func(dst, src *T, n int)
	switch op {
	case Sum:
		f = k.add
	case Product:
		f = k.mul
	case Min:
		f = k.min
	case Max:
		f = k.max
	default:
		return 0
	}
	f(&dst[0], &src[0], n)
	return n
}

func reduceF32(op ReduceOp, dst, src []float32) {
	n := kernF32.vector(op, dst, src, 8)
	reduceGo(op, dst[n:], src[n:])
}

func reduceF64(op ReduceOp, dst, src []float64) {
	n := kernF64.vector(op, dst, src, 4)
	reduceGo(op, dst[n:], src[n:])
}

func reduceF16(op ReduceOp, dst, src []uint16) {
	n := kernF16.vector(op, dst, src, 8)
	reduceHalfGo(op, dst[n:], src[n:], float16ToFloat32, float32ToFloat16)
}

func reduceBF16(op ReduceOp, dst, src []uint16) {
	n := kernBF16.vector(op, dst, src, 8)
	reduceHalfGo(op, dst[n:], src[n:], bfloat16ToFloat32, float32ToBFloat16)
}

func scaleF32(s []float32, f float32) {
	if n := len(s) &^ 7; hasVector && n > 0 {
		scalF32(&s[0], n, f)
		s = s[n:]
	}
	scaleGo(s, f)
}

func scaleF64(s []float64, f float64) {
	if n := len(s) &^ 3; hasVector && n > 0 {
		scalF64(&s[0], n, f)
		s = s[n:]
	}
	scaleGo(s, f)
}

func scaleF16(s []uint16, f float32) {
	if n := len(s) &^ 7; hasVector && n > 0 {
		scalF16(&s[0], n, f)
		s = s[n:]
	}
	scaleHalfGo(s, f, float16ToFloat32, float32ToFloat16)
}

func scaleBF16(s []uint16, f float32) {
	if n := len(s) &^ 7; hasVector && n > 0 {
		scalBF16(&s[0], n, f)
		s = s[n:]
	}
	scaleHalfGo(s, f, bfloat16ToFloat32, float32ToBFloat16)
}

func f16to32(dst []float32, src []uint16) {
	if n := len(src) &^ 7; hasVector && n > 0 {
		cvtF16F32(&dst[0], &src[0], n)
		dst, src = dst[n:], src[n:]
	}
	f16to32Go(dst, src)
}

func f32to16(dst []uint16, src []float32) {
	if n := len(src) &^ 7; hasVector && n > 0 {
		cvtF32F16(&dst[0], &src[0], n)
		dst, src = dst[n:], src[n:]
	}
	f32to16Go(dst, src)
}

func bf16to32(dst []float32, src []uint16) {
	if n := len(src) &^ 7; hasVector && n > 0 {
		cvtBF16F32(&dst[0], &src[0], n)
		dst, src = dst[n:], src[n:]
	}
	bf16to32Go(dst, src)
}

func f32tobf16(dst []uint16, src []float32) {
	if n := len(src) &^ 7; hasVector && n > 0 {
		cvtF32BF16(&dst[0], &src[0], n)
		dst, src = dst[n:], src[n:]
	}
	f32tobf16Go(dst, src)
}

// Integer kernels count bytes; n is a multiple of 32.

//go:noescape
func addI8(dst, src *byte, n int)

//go:noescape
func addI32(dst, src *byte, n int)

//go:noescape
func addI64(dst, src *byte, n int)

//go:noescape
func mulI32(dst, src *byte, n int)

//go:noescape
func minI8(dst, src *byte, n int)

//go:noescape
func maxI8(dst, src *byte, n int)

//go:noescape
func minU8(dst, src *byte, n int)

//go:noescape
func maxU8(dst, src *byte, n int)

//go:noescape
func minI32(dst, src *byte, n int)

//go:noescape
func maxI32(dst, src *byte, n int)

//go:noescape
func addI16(dst, src *byte, n int)

//go:noescape
func mulI16(dst, src *byte, n int)

//go:noescape
func minI16(dst, src *byte, n int)

//go:noescape
func maxI16(dst, src *byte, n int)

//go:noescape
func minU16(dst, src *byte, n int)

//go:noescape
func maxU16(dst, src *byte, n int)

//go:noescape
func andBytes(dst, src *byte, n int)

//go:noescape
func orBytes(dst, src *byte, n int)

// intKernels lists the vector integer kernels; nil where AVX2 has no
// instruction (64-bit min, max and multiply, 8-bit multiply).
var intKernels = [numDTypes][numReduceOps]func(dst, src *byte, n int){
	Int8:   {Sum: addI8, Min: minI8, Max: maxI8, BitAnd: andBytes, BitOr: orBytes},
	Uint8:  {Sum: addI8, Min: minU8, Max: maxU8, BitAnd: andBytes, BitOr: orBytes},
	Int32:  {Sum: addI32, Product: mulI32, Min: minI32, Max: maxI32, BitAnd: andBytes, BitOr: orBytes},
	Int64:  {Sum: addI64, BitAnd: andBytes, BitOr: orBytes},
	Uint64: {Sum: addI64, BitAnd: andBytes, BitOr: orBytes},
	Int16:  {Sum: addI16, Product: mulI16, Min: minI16, Max: maxI16, BitAnd: andBytes, BitOr: orBytes},
	Uint16: {Sum: addI16, Product: mulI16, Min: minU16, Max: maxU16, BitAnd: andBytes, BitOr: orBytes},
	// Bool: "or" is the unsigned byte maximum, "and" the minimum (see Reduce).
	Bool: {Sum: maxU8, Max: maxU8, Product: minU8, Min: minU8, BitAnd: andBytes, BitOr: orBytes},
}

func reduceInt(dt DType, op ReduceOp, dst, src []byte) {
	if f := intKernels[dt][op]; hasVector && f != nil {
		if n := len(dst) &^ 31; n > 0 {
			src = src[:len(dst)]
			f(&dst[0], &src[0], n)
			dst, src = dst[n:], src[n:]
		}
	}
	reduceIntBytesGo(dt, op, dst, src)
}
