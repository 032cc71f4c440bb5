package tensor

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// Shape is the extent of each dimension. A nil or empty Shape is a scalar
// (one element).
type Shape []int

// NumElements returns the product of the dimensions (1 for a scalar).
func (s Shape) NumElements() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether s and o have the same dimensions.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone returns a copy of s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// String prints the shape as Horovod does: "[17, 17, 17]".
func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Validate returns an error if a dimension is negative.
func (s Shape) Validate() error {
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("tensor: dimension %d of shape %v is negative", i, s)
		}
	}
	return nil
}

// DeviceKind says where a tensor's storage lives.
type DeviceKind uint8

// Device kinds.
const (
	CPU DeviceKind = iota // host memory
	GPU                   // CUDA device memory
)

// Device names a place for tensor storage: the host, or a GPU by index.
type Device struct {
	Kind  DeviceKind
	Index int
}

// String returns "CPU" or "GPU" (with the index when it is not 0), the words
// Horovod's device-mismatch message uses.
func (d Device) String() string {
	if d.Kind == CPU {
		return "CPU"
	}
	if d.Index == 0 {
		return "GPU"
	}
	return fmt.Sprintf("GPU:%d", d.Index)
}

// Tensor is a typed, shaped view over contiguous storage. Host tensors keep
// their bytes in a Go slice that may alias a slice the caller owns; device
// tensors (Device().Kind == GPU) carry a device pointer instead.
type Tensor struct {
	dtype  DType
	shape  Shape
	data   []byte
	device Device
	ptr    uintptr
}

// ErrShape is returned when a shape does not match the data given.
var ErrShape = errors.New("tensor: shape does not match the data")

// New returns a zero-filled host tensor.
func New(dt DType, shape ...int) *Tensor {
	if !dt.Valid() {
		panic("tensor: New with invalid dtype")
	}
	s := Shape(shape)
	if err := s.Validate(); err != nil {
		panic(err.Error())
	}
	return &Tensor{dtype: dt, shape: s.Clone(), data: make([]byte, s.NumElements()*dt.Size())}
}

// FromBytes wraps data (not copied) as a host tensor of the given type and
// shape. With no shape, the tensor is one-dimensional.
func FromBytes(dt DType, data []byte, shape ...int) (*Tensor, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("tensor: invalid dtype %v", dt)
	}
	if len(data)%dt.Size() != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of %v elements", ErrShape, len(data), dt)
	}
	n := len(data) / dt.Size()
	s := Shape(shape)
	if len(shape) == 0 {
		s = Shape{n}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.NumElements() != n {
		return nil, fmt.Errorf("%w: shape %v holds %d elements, data has %d", ErrShape, s, s.NumElements(), n)
	}
	return &Tensor{dtype: dt, shape: s.Clone(), data: data}, nil
}

// NewDevice returns a tensor that describes device memory at ptr. The tensor
// does not own the memory; the cuda package allocates and frees it.
func NewDevice(dt DType, dev Device, ptr uintptr, shape ...int) *Tensor {
	if !dt.Valid() {
		panic("tensor: NewDevice with invalid dtype")
	}
	return &Tensor{dtype: dt, shape: Shape(shape).Clone(), device: dev, ptr: ptr}
}

// Element is the set of Go types that back a tensor's elements.
type Element interface {
	~float32 | ~float64 | ~int8 | ~uint8 | int16 | uint16 | ~int32 | ~int64 | ~uint64 | ~bool |
		Float16Bits | BFloat16Bits
}

// Float16Bits is one IEEE binary16 value, as its bit pattern.
type Float16Bits uint16

// BFloat16Bits is one bfloat16 value, as its bit pattern.
type BFloat16Bits uint16

// DTypeOf returns the DType that matches the element type T.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case Float16Bits:
		return Float16
	case BFloat16Bits:
		return BFloat16
	case int8:
		return Int8
	case uint8:
		return Uint8
	case int32:
		return Int32
	case int64:
		return Int64
	case uint64:
		return Uint64
	case int16:
		return Int16
	case uint16:
		return Uint16
	case bool:
		return Bool
	}
	panic(fmt.Sprintf("tensor: no dtype for %T", z))
}

// From wraps s (not copied) as a host tensor. With no shape the tensor is
// one-dimensional; otherwise the shape must hold exactly len(s) elements.
func From[T Element](s []T, shape ...int) *Tensor {
	dt := DTypeOf[T]()
	t, err := FromBytes(dt, asBytes(s), shape...)
	if err != nil {
		panic(err.Error())
	}
	return t
}

// View returns the tensor's host storage as a []T, without copying. It
// panics if T does not match the tensor's dtype or the tensor is on a device.
func View[T Element](t *Tensor) []T {
	dt := DTypeOf[T]()
	if t.dtype != dt {
		panic(fmt.Sprintf("tensor: view of a %v tensor as %v", t.dtype, dt))
	}
	if t.device.Kind != CPU {
		panic("tensor: host view of a device tensor")
	}
	return fromBytes[T](t.data)
}

// asBytes reinterprets s as bytes. The result keeps s's capacity, so that
// tensors made from neighbouring subslices of one slice are seen to be
// neighbours in one allocation (see Follows).
func asBytes[T any](s []T) []byte {
	if cap(s) == 0 {
		return []byte{}
	}
	var z T
	size := int(unsafe.Sizeof(z))
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), cap(s)*size)[:len(s)*size]
}

func fromBytes[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// FromFloat32 wraps s without copying.
func FromFloat32(s []float32, shape ...int) *Tensor { return From(s, shape...) }

// FromFloat64 wraps s without copying.
func FromFloat64(s []float64, shape ...int) *Tensor { return From(s, shape...) }

// FromInt32 wraps s without copying.
func FromInt32(s []int32, shape ...int) *Tensor { return From(s, shape...) }

// FromInt64 wraps s without copying.
func FromInt64(s []int64, shape ...int) *Tensor { return From(s, shape...) }

// FromUint64 wraps s without copying.
func FromUint64(s []uint64, shape ...int) *Tensor { return From(s, shape...) }

// FromInt8 wraps s without copying.
func FromInt8(s []int8, shape ...int) *Tensor { return From(s, shape...) }

// FromUint8 wraps s without copying.
func FromUint8(s []uint8, shape ...int) *Tensor { return From(s, shape...) }

// FromInt16 wraps s without copying.
func FromInt16(s []int16, shape ...int) *Tensor { return From(s, shape...) }

// FromUint16 wraps s without copying.
func FromUint16(s []uint16, shape ...int) *Tensor { return From(s, shape...) }

// FromBool wraps s without copying. A Go bool is one byte holding 0 or 1,
// which is exactly the Bool layout.
func FromBool(s []bool, shape ...int) *Tensor { return From(s, shape...) }

// DType returns the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns the shape. The caller must not modify it.
func (t *Tensor) Shape() Shape { return t.shape }

// Len returns the number of elements.
func (t *Tensor) Len() int { return t.shape.NumElements() }

// NumBytes returns the size of the storage in bytes.
func (t *Tensor) NumBytes() int { return t.Len() * t.dtype.Size() }

// Device returns where the storage lives.
func (t *Tensor) Device() Device { return t.device }

// DevicePtr returns the device pointer of a device tensor (0 for host tensors).
func (t *Tensor) DevicePtr() uintptr { return t.ptr }

// Bytes returns the host storage, without copying. It panics for a device tensor.
func (t *Tensor) Bytes() []byte {
	if t.device.Kind != CPU {
		panic("tensor: Bytes of a device tensor")
	}
	return t.data
}

// Float32s returns the storage as []float32 (the dtype must be Float32).
func (t *Tensor) Float32s() []float32 { return View[float32](t) }

// Float64s returns the storage as []float64 (the dtype must be Float64).
func (t *Tensor) Float64s() []float64 { return View[float64](t) }

// Int32s returns the storage as []int32 (the dtype must be Int32).
func (t *Tensor) Int32s() []int32 { return View[int32](t) }

// Int64s returns the storage as []int64 (the dtype must be Int64).
func (t *Tensor) Int64s() []int64 { return View[int64](t) }

// Uint64s returns the storage as []uint64 (the dtype must be Uint64).
func (t *Tensor) Uint64s() []uint64 { return View[uint64](t) }

// Int8s returns the storage as []int8 (the dtype must be Int8).
func (t *Tensor) Int8s() []int8 { return View[int8](t) }

// Uint8s returns the storage as []uint8 (the dtype must be Uint8).
func (t *Tensor) Uint8s() []uint8 { return View[uint8](t) }

// Int16s returns the storage as []int16 (the dtype must be Int16).
func (t *Tensor) Int16s() []int16 { return View[int16](t) }

// Uint16s returns the storage as []uint16 (the dtype must be Uint16).
func (t *Tensor) Uint16s() []uint16 { return View[uint16](t) }

// Bools returns the storage as []bool (the dtype must be Bool). Every byte
// of the storage must be 0 or 1, as Go requires of a bool; tensors made with
// FromBool or New, and the results of collectives on them, are. A tensor
// made with FromBytes from other bytes must be read with Bytes instead.
func (t *Tensor) Bools() []bool { return View[bool](t) }

// Clone returns a host tensor with a copy of t's data and shape.
func (t *Tensor) Clone() *Tensor {
	c := &Tensor{dtype: t.dtype, shape: t.shape.Clone(), data: append([]byte(nil), t.Bytes()...)}
	if c.data == nil {
		c.data = []byte{}
	}
	return c
}

// Reshape returns a tensor that shares t's storage with a new shape holding
// the same number of elements.
func (t *Tensor) Reshape(shape ...int) (*Tensor, error) {
	s := Shape(shape)
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.NumElements() != t.Len() {
		return nil, fmt.Errorf("%w: cannot reshape %v to %v", ErrShape, t.shape, s)
	}
	c := *t
	c.shape = s.Clone()
	return &c, nil
}

// RowSize returns the number of elements in one slice along the first
// dimension (1 for scalars and vectors).
func (t *Tensor) RowSize() int {
	if len(t.shape) <= 1 {
		return 1
	}
	return Shape(t.shape[1:]).NumElements()
}

// Rows returns the tensor made of rows [lo, hi) along the first dimension,
// sharing t's storage.
func (t *Tensor) Rows(lo, hi int) *Tensor {
	if len(t.shape) == 0 || lo < 0 || hi < lo || hi > t.shape[0] {
		panic(fmt.Sprintf("tensor: rows [%d, %d) out of range for shape %v", lo, hi, t.shape))
	}
	rb := t.RowSize() * t.dtype.Size()
	c := *t
	c.shape = append(Shape{hi - lo}, t.shape[1:]...)
	if t.device.Kind == CPU {
		c.data = t.data[lo*rb : hi*rb]
	} else {
		c.ptr = t.ptr + uintptr(lo*rb)
	}
	return &c
}

// NewFlat returns one zero-filled host tensor holding every shape's elements
// back to back, and a tensor per shape that is a view of its part, in order.
// Gradients allocated this way are reduced in place as one buffer when they
// are fused (no copy into or out of the fusion buffer), as with PyTorch
// DDP's gradient_as_bucket_view.
func NewFlat(dt DType, shapes ...Shape) (flat *Tensor, parts []*Tensor) {
	total := 0
	for _, s := range shapes {
		if err := s.Validate(); err != nil {
			panic(err.Error())
		}
		total += s.NumElements()
	}
	flat = New(dt, total)
	parts = make([]*Tensor, len(shapes))
	off := 0
	for i, s := range shapes {
		n := s.NumElements() * dt.Size()
		parts[i] = &Tensor{dtype: dt, shape: s.Clone(), data: flat.data[off : off+n]}
		off += n
	}
	return flat, parts
}

// Follows reports whether b's host storage starts exactly where a's ends,
// within one allocation (a's storage has capacity left that b occupies):
// the two can then be handled as one run of bytes, a.Bytes() extended to
// its capacity. Empty tensors follow nothing.
func Follows(b, a *Tensor) bool {
	if a.device.Kind != CPU || b.device.Kind != CPU || len(b.data) == 0 || len(a.data) >= cap(a.data) {
		return false
	}
	return &a.data[:len(a.data)+1][len(a.data)] == &b.data[0]
}

// String describes the tensor briefly: dtype, shape and device.
func (t *Tensor) String() string {
	return fmt.Sprintf("Tensor(%v, %v, %v)", t.dtype, t.shape, t.device)
}
