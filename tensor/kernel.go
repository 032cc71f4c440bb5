package tensor

import (
	"fmt"
	"math"
)

// Reduce combines src into dst elementwise, dst[i] = op(dst[i], src[i]), for
// elements of type dt stored in the two byte slices. Half-precision values
// are combined in float32 and rounded once per element. It panics if the
// slices differ in length, the length is not a whole number of elements, or
// op is not defined on dt.
func Reduce(dt DType, op ReduceOp, dst, src []byte) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("tensor: Reduce of %d bytes into %d bytes", len(src), len(dst)))
	}
	if !op.Supports(dt) {
		panic(fmt.Sprintf("tensor: Reduce %v is not defined on %v", op, dt))
	}
	if len(dst)%dt.Size() != 0 {
		panic(fmt.Sprintf("tensor: Reduce of %d bytes is not a whole number of %v elements", len(dst), dt))
	}
	switch dt {
	case Float32:
		reduceFloat(op, fromBytes[float32](dst), fromBytes[float32](src))
	case Float64:
		reduceFloat(op, fromBytes[float64](dst), fromBytes[float64](src))
	case Float16:
		reduceHalf(op, fromBytes[uint16](dst), fromBytes[uint16](src), float16ToFloat32, float32ToFloat16)
	case BFloat16:
		reduceHalf(op, fromBytes[uint16](dst), fromBytes[uint16](src), bfloat16ToFloat32, float32ToBFloat16)
	case Int8:
		reduceInt(op, fromBytes[int8](dst), fromBytes[int8](src))
	case Uint8:
		reduceInt(op, fromBytes[uint8](dst), fromBytes[uint8](src))
	case Int32:
		reduceInt(op, fromBytes[int32](dst), fromBytes[int32](src))
	case Int64:
		reduceInt(op, fromBytes[int64](dst), fromBytes[int64](src))
	case Uint64:
		reduceInt(op, fromBytes[uint64](dst), fromBytes[uint64](src))
	}
}

// ReduceInto combines src into dst elementwise (see Reduce). It returns an
// error if the tensors differ in dtype or element count or live on a device.
func ReduceInto(dst, src *Tensor, op ReduceOp) error {
	if dst.dtype != src.dtype {
		return fmt.Errorf("tensor: reduce of %v into %v", src.dtype, dst.dtype)
	}
	if dst.Len() != src.Len() {
		return fmt.Errorf("tensor: reduce of %d elements into %d", src.Len(), dst.Len())
	}
	if !op.Supports(dst.dtype) {
		return fmt.Errorf("tensor: %v is not defined on %v", op, dst.dtype)
	}
	if dst.device.Kind != CPU || src.device.Kind != CPU {
		return fmt.Errorf("tensor: host reduce of a device tensor")
	}
	Reduce(dst.dtype, op, dst.data, src.data)
	return nil
}

type float interface{ ~float32 | ~float64 }

type integer interface {
	~int8 | ~uint8 | ~int32 | ~int64 | ~uint64
}

func reduceFloat[T float](op ReduceOp, dst, src []T) {
	src = src[:len(dst)]
	switch op {
	case Sum:
		for i, v := range src {
			dst[i] += v
		}
	case Product:
		for i, v := range src {
			dst[i] *= v
		}
	case Min:
		for i, v := range src {
			dst[i] = fmin(dst[i], v)
		}
	case Max:
		for i, v := range src {
			dst[i] = fmax(dst[i], v)
		}
	}
}

// fmin and fmax propagate NaN, as MPI_MIN/MPI_MAX do on common implementations.
func fmin[T float](a, b T) T {
	if a != a || b < a {
		if a != a {
			return a
		}
		return b
	}
	return a
}

func fmax[T float](a, b T) T {
	if a != a || b > a {
		if a != a {
			return a
		}
		return b
	}
	return a
}

func reduceInt[T integer](op ReduceOp, dst, src []T) {
	src = src[:len(dst)]
	switch op {
	case Sum:
		for i, v := range src {
			dst[i] += v
		}
	case Product:
		for i, v := range src {
			dst[i] *= v
		}
	case Min:
		for i, v := range src {
			dst[i] = min(dst[i], v)
		}
	case Max:
		for i, v := range src {
			dst[i] = max(dst[i], v)
		}
	case BitAnd:
		for i, v := range src {
			dst[i] &= v
		}
	case BitOr:
		for i, v := range src {
			dst[i] |= v
		}
	}
}

func reduceHalf(op ReduceOp, dst, src []uint16, toF func(uint16) float32, fromF func(float32) uint16) {
	src = src[:len(dst)]
	for i, v := range src {
		a, b := toF(dst[i]), toF(v)
		var r float32
		switch op {
		case Sum:
			r = a + b
		case Product:
			r = a * b
		case Min:
			r = fmin(a, b)
		case Max:
			r = fmax(a, b)
		}
		dst[i] = fromF(r)
	}
}

// Scale multiplies every element of buf (elements of type dt) by factor.
// Floating types scale in their own precision (half precision through
// float32); integers are scaled in float64 and truncated toward zero, as
// Horovod does for Average on integer tensors.
func Scale(dt DType, buf []byte, factor float64) {
	if len(buf)%max(dt.Size(), 1) != 0 || !dt.Valid() {
		panic(fmt.Sprintf("tensor: Scale of %d bytes of %v", len(buf), dt))
	}
	if factor == 1 {
		return
	}
	switch dt {
	case Float32:
		f := float32(factor)
		s := fromBytes[float32](buf)
		for i := range s {
			s[i] *= f
		}
	case Float64:
		s := fromBytes[float64](buf)
		for i := range s {
			s[i] *= factor
		}
	case Float16:
		scaleHalf(fromBytes[uint16](buf), float32(factor), float16ToFloat32, float32ToFloat16)
	case BFloat16:
		scaleHalf(fromBytes[uint16](buf), float32(factor), bfloat16ToFloat32, float32ToBFloat16)
	case Int8:
		scaleInt(fromBytes[int8](buf), factor)
	case Uint8:
		scaleInt(fromBytes[uint8](buf), factor)
	case Int32:
		scaleInt(fromBytes[int32](buf), factor)
	case Int64:
		scaleInt(fromBytes[int64](buf), factor)
	case Uint64:
		scaleInt(fromBytes[uint64](buf), factor)
	}
}

func scaleHalf(s []uint16, f float32, toF func(uint16) float32, fromF func(float32) uint16) {
	for i, v := range s {
		s[i] = fromF(toF(v) * f)
	}
}

func scaleInt[T integer](s []T, f float64) {
	for i, v := range s {
		s[i] = T(math.Trunc(float64(v) * f))
	}
}

// ScaleTensor multiplies every element of a host tensor by factor (see Scale).
func ScaleTensor(t *Tensor, factor float64) { Scale(t.dtype, t.Bytes(), factor) }
