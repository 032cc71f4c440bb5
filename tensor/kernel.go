package tensor

import "fmt"

// Reduce combines src into dst elementwise, dst[i] = op(dst[i], src[i]), for
// elements of type dt stored in the two byte slices (native byte order; the
// storage need not be aligned).
//
// Floating-point sums and products are IEEE operations in the element's
// precision. Half-precision values (Float16, BFloat16) are widened to
// float32, combined, and rounded once to nearest even. Min and Max follow
// Go's builtins: a NaN on either side gives NaN, and -0 counts as less than
// +0. Integer sums and products wrap around. BitAnd and BitOr are defined on
// integer types and Bool only.
//
// Bool reductions are logical: Sum and Max are "or" (true if any element is
// true), Min and Product are "and" (true if every element is). They are
// computed as the unsigned byte maximum and minimum, which is what the MPI
// and NCCL transports run as well, so a byte other than 0 and 1 counts as
// true and the three transports agree bit for bit on any input. BitAnd and
// BitOr act on the bytes.
//
// On amd64 with AVX2 and F16C the work runs in 256-bit vector loops (the
// purego build tag turns them off); results are bit-identical to the Go
// loops, except that a NaN's payload may differ.
//
// It panics if the slices differ in length, the length is not a whole
// number of elements, or op is not defined on dt: these are programmer
// errors in a hot loop. ReduceInto checks the same things and returns errors.
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
		reduceF32(op, fromBytes[float32](dst), fromBytes[float32](src))
	case Float64:
		reduceF64(op, fromBytes[float64](dst), fromBytes[float64](src))
	case Float16:
		reduceF16(op, fromBytes[uint16](dst), fromBytes[uint16](src))
	case BFloat16:
		reduceBF16(op, fromBytes[uint16](dst), fromBytes[uint16](src))
	default:
		reduceInt(dt, op, dst, src)
	}
}

// reduceIntBytesGo runs the portable integer kernels on byte storage.
func reduceIntBytesGo(dt DType, op ReduceOp, dst, src []byte) {
	switch dt {
	case Int8:
		reduceIntGo(op, fromBytes[int8](dst), fromBytes[int8](src))
	case Uint8:
		reduceIntGo(op, fromBytes[uint8](dst), fromBytes[uint8](src))
	case Int32:
		reduceIntGo(op, fromBytes[int32](dst), fromBytes[int32](src))
	case Int64:
		reduceIntGo(op, fromBytes[int64](dst), fromBytes[int64](src))
	case Uint64:
		reduceIntGo(op, fromBytes[uint64](dst), fromBytes[uint64](src))
	case Int16:
		reduceIntGo(op, fromBytes[int16](dst), fromBytes[int16](src))
	case Uint16:
		reduceIntGo(op, fromBytes[uint16](dst), fromBytes[uint16](src))
	case Bool:
		reduceIntGo(boolOp(op), dst, src)
	}
}

// boolOp returns the unsigned byte reduction that computes op on Bool
// elements: Max for the "or" reductions, Min for the "and" ones.
func boolOp(op ReduceOp) ReduceOp {
	switch op {
	case Sum:
		return Max
	case Product:
		return Min
	}
	return op
}

// BoolOp returns the reduction on unsigned bytes that computes op on Bool
// elements (Sum becomes Max and Product becomes Min; the others stay), for
// transports that move Bool tensors as bytes.
func BoolOp(op ReduceOp) ReduceOp { return boolOp(op) }

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

// Scale multiplies every element of buf (elements of type dt) by factor.
// Float32 scales by float32(factor) in float32, Float64 in float64, and the
// half-precision types through float32 with one rounding per element.
// Integers are multiplied in float64 and truncated toward zero, as Horovod's
// Average does on integer tensors; 64-bit values beyond 2^53 lose precision
// in the float64 product, and a result outside the type's range is
// unspecified. A Bool element stays true only if it is true and factor is
// not 0. A factor of 1 leaves buf untouched. It panics if dt is invalid or buf is not a whole number of
// elements.
func Scale(dt DType, buf []byte, factor float64) {
	if len(buf)%max(dt.Size(), 1) != 0 || !dt.Valid() {
		panic(fmt.Sprintf("tensor: Scale of %d bytes of %v", len(buf), dt))
	}
	if factor == 1 {
		return
	}
	switch dt {
	case Float32:
		scaleF32(fromBytes[float32](buf), float32(factor))
	case Float64:
		scaleF64(fromBytes[float64](buf), factor)
	case Float16:
		scaleF16(fromBytes[uint16](buf), float32(factor))
	case BFloat16:
		scaleBF16(fromBytes[uint16](buf), float32(factor))
	case Int8:
		scaleIntGo(fromBytes[int8](buf), factor)
	case Uint8:
		scaleIntGo(fromBytes[uint8](buf), factor)
	case Int32:
		scaleIntGo(fromBytes[int32](buf), factor)
	case Int64:
		scaleIntGo(fromBytes[int64](buf), factor)
	case Uint64:
		scaleIntGo(fromBytes[uint64](buf), factor)
	case Int16:
		scaleIntGo(fromBytes[int16](buf), factor)
	case Uint16:
		scaleIntGo(fromBytes[uint16](buf), factor)
	case Bool:
		if factor == 0 || factor != factor {
			clear(buf)
		}
	}
}

// ScaleTensor multiplies every element of a host tensor by factor (see Scale).
func ScaleTensor(t *Tensor, factor float64) { Scale(t.dtype, t.Bytes(), factor) }
