package tensor

import "fmt"

// DType is the element type of a tensor.
type DType uint8

// The element types. The zero value is Invalid, so that a forgotten dtype is
// caught rather than silently read as float32. The numbering is part of the
// runtime's wire format (ranks exchange dtypes as these numbers) and of the
// mpi package's C side: new types are appended, existing ones never move.
const (
	Invalid  DType = iota
	Float32        // IEEE 754 binary32
	Float64        // IEEE 754 binary64
	Float16        // IEEE 754 binary16 (half precision)
	BFloat16       // bfloat16: the upper half of a binary32
	Int8           // signed 8-bit integer
	Uint8          // unsigned 8-bit integer
	Int32          // signed 32-bit integer
	Int64          // signed 64-bit integer
	Uint64         // unsigned 64-bit integer (bit vectors for negotiation)
	Int16          // signed 16-bit integer
	Uint16         // unsigned 16-bit integer
	Bool           // boolean, one byte per element: 0 is false, 1 is true (see Reduce)
	numDTypes
)

var dtypeInfo = [numDTypes]struct {
	name string
	size int
}{
	Invalid:  {"invalid", 0},
	Float32:  {"float32", 4},
	Float64:  {"float64", 8},
	Float16:  {"float16", 2},
	BFloat16: {"bfloat16", 2},
	Int8:     {"int8", 1},
	Uint8:    {"uint8", 1},
	Int32:    {"int32", 4},
	Int64:    {"int64", 8},
	Uint64:   {"uint64", 8},
	Int16:    {"int16", 2},
	Uint16:   {"uint16", 2},
	Bool:     {"bool", 1},
}

// DTypes lists every valid element type, in declaration order.
func DTypes() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := Float32; d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// Valid reports whether d is one of the declared element types.
func (d DType) Valid() bool { return d > Invalid && d < numDTypes }

// Size returns the size of one element in bytes (0 for Invalid).
func (d DType) Size() int {
	if d >= numDTypes {
		return 0
	}
	return dtypeInfo[d].size
}

// String returns the lower-case name of the type, as Horovod prints it
// ("float32", "int64", ...).
func (d DType) String() string {
	if d >= numDTypes {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16
}

// ParseDType returns the type with the given name.
func ParseDType(name string) (DType, error) {
	for d := Float32; d < numDTypes; d++ {
		if dtypeInfo[d].name == name {
			return d, nil
		}
	}
	return Invalid, fmt.Errorf("tensor: unknown dtype %q", name)
}

// ReduceOp is a reduction: the one type of the whole project, from the
// element-wise kernels here to the public API (hvd.ReduceOp is this type).
// The first six carry Horovod's names and numbering, which its mismatch
// error prints. Average and Adasum are not element-wise: the runtime
// carries them out with Sum's kernel (Kernel) and a scale, or with
// Adasum's pairwise rule. BitAnd and BitOr apply to integer types only;
// the runtime uses them on Uint64 bit vectors to agree on cached
// responses.
type ReduceOp uint8

// The reductions.
const (
	Average ReduceOp = iota // the mean over ranks: Sum, then a scale
	Sum
	Adasum // adaptive summation (Maleki et al.)
	Min
	Max
	Product
	BitAnd
	BitOr
	numReduceOps
)

var opNames = [numReduceOps]string{"Average", "Sum", "Adasum", "Min", "Max", "Product", "BitAnd", "BitOr"}

// ReduceOps lists the element-wise reductions (those Reduce carries out),
// in declaration order.
func ReduceOps() []ReduceOp {
	return []ReduceOp{Sum, Min, Max, Product, BitAnd, BitOr}
}

// Valid reports whether op is a declared reduction.
func (op ReduceOp) Valid() bool { return op < numReduceOps }

// Elementwise reports whether op is one of the element-wise reductions
// that Reduce carries out (every reduction but Average and Adasum).
func (op ReduceOp) Elementwise() bool { return op.Valid() && op != Average && op != Adasum }

// Kernel is the element-wise reduction that carries op out: Average and
// Adasum (whose pairwise steps add) use Sum's; the others are their own.
func (op ReduceOp) Kernel() ReduceOp {
	if op == Average || op == Adasum {
		return Sum
	}
	return op
}

// String returns the name of the reduction ("Sum").
func (op ReduceOp) String() string {
	if op >= numReduceOps {
		return fmt.Sprintf("ReduceOp(%d)", uint8(op))
	}
	return opNames[op]
}

// Supports reports whether the element-wise reduction op is defined on
// elements of type d (false for Average and Adasum, which are not
// element-wise). Every element-wise reduction is defined on Bool, as a
// logical one (see Reduce); BitAnd and BitOr are not defined on the
// floating-point types.
func (op ReduceOp) Supports(d DType) bool {
	if !d.Valid() || !op.Elementwise() {
		return false
	}
	if op == BitAnd || op == BitOr {
		return !d.IsFloat()
	}
	return true
}
