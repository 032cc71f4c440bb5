package tensor

// Portable kernels in plain Go. They are the whole implementation on
// platforms without assembly (or with the purego build tag), and they finish
// the tails the vector kernels leave. Loops are unrolled four ways with
// re-sliced windows so that the compiler drops the bounds checks.

type float interface{ ~float32 | ~float64 }

type integer interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~int64 | ~uint64
}

type number interface{ float | integer }

// addGo sets dst[i] += src[i].
func addGo[T number](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i <= len(dst)-4; i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// mulGo sets dst[i] *= src[i].
func mulGo[T number](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i <= len(dst)-4; i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] *= s[0]
		d[1] *= s[1]
		d[2] *= s[2]
		d[3] *= s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] *= src[i]
	}
}

// minGo sets dst[i] = min(dst[i], src[i]). For floats the builtin min
// propagates NaN and orders -0 below +0.
func minGo[T number](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i <= len(dst)-4; i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] = min(d[0], s[0])
		d[1] = min(d[1], s[1])
		d[2] = min(d[2], s[2])
		d[3] = min(d[3], s[3])
	}
	for ; i < len(dst); i++ {
		dst[i] = min(dst[i], src[i])
	}
}

// maxGo sets dst[i] = max(dst[i], src[i]) (NaN propagates, +0 above -0).
func maxGo[T number](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i <= len(dst)-4; i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] = max(d[0], s[0])
		d[1] = max(d[1], s[1])
		d[2] = max(d[2], s[2])
		d[3] = max(d[3], s[3])
	}
	for ; i < len(dst); i++ {
		dst[i] = max(dst[i], src[i])
	}
}

// andGo sets dst[i] &= src[i].
func andGo[T integer](dst, src []T) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] &= v
	}
}

// orGo sets dst[i] |= src[i].
func orGo[T integer](dst, src []T) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] |= v
	}
}

// reduceGo applies op elementwise with the portable kernels.
func reduceGo[T number](op ReduceOp, dst, src []T) {
	switch op {
	case Sum:
		addGo(dst, src)
	case Product:
		mulGo(dst, src)
	case Min:
		minGo(dst, src)
	case Max:
		maxGo(dst, src)
	}
}

// reduceIntGo adds the bitwise reductions to reduceGo.
func reduceIntGo[T integer](op ReduceOp, dst, src []T) {
	switch op {
	case BitAnd:
		andGo(dst, src)
	case BitOr:
		orGo(dst, src)
	default:
		reduceGo(op, dst, src)
	}
}

// scaleGo multiplies every element by f in T's own precision.
func scaleGo[T float](s []T, f T) {
	i := 0
	for ; i <= len(s)-4; i += 4 {
		w := s[i : i+4 : i+4]
		w[0] *= f
		w[1] *= f
		w[2] *= f
		w[3] *= f
	}
	for ; i < len(s); i++ {
		s[i] *= f
	}
}

// scaleIntGo scales integers in float64 and truncates toward zero (Go's
// float-to-integer conversion), as Horovod's Average does on integer
// tensors.
func scaleIntGo[T integer](s []T, f float64) {
	for i, v := range s {
		s[i] = T(float64(v) * f)
	}
}

// reduceHalfGo combines half-precision values in float32 and rounds once.
func reduceHalfGo(op ReduceOp, dst, src []uint16, toF func(uint16) float32, fromF func(float32) uint16) {
	src = src[:len(dst)]
	switch op {
	case Sum:
		for i, v := range src {
			dst[i] = fromF(toF(dst[i]) + toF(v))
		}
	case Product:
		for i, v := range src {
			dst[i] = fromF(toF(dst[i]) * toF(v))
		}
	case Min:
		for i, v := range src {
			dst[i] = fromF(min(toF(dst[i]), toF(v)))
		}
	case Max:
		for i, v := range src {
			dst[i] = fromF(max(toF(dst[i]), toF(v)))
		}
	}
}

// scaleHalfGo multiplies half-precision values by f in float32.
func scaleHalfGo(s []uint16, f float32, toF func(uint16) float32, fromF func(float32) uint16) {
	for i, v := range s {
		s[i] = fromF(toF(v) * f)
	}
}
