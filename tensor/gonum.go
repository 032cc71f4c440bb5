package tensor

import (
	"errors"
	"fmt"

	"gonum.org/v1/gonum/mat"
)

// gonum interop. gonum's matrices hold float64 values in row-major order
// with a row stride; a matrix whose stride equals its column count is one
// contiguous block and can be wrapped as a tensor without copying, and a
// float64 tensor can be seen as a matrix the same way.

// ErrNotContiguous is returned when a gonum matrix or vector has gaps between
// its rows or elements (a column slice of a wider matrix, a vector with an
// increment other than 1), so its storage cannot back a tensor. FromMatrix
// copies instead.
var ErrNotContiguous = errors.New("tensor: storage is not contiguous")

// FromDense returns a Float64 tensor of shape [rows, cols] that shares m's
// storage: writes through either are seen by both. It returns an error
// wrapping ErrNotContiguous if m's row stride is larger than its column
// count (for example a column slice of a wider matrix); use FromMatrix to
// copy such a matrix. An empty matrix gives a tensor of shape [0, 0].
func FromDense(m *mat.Dense) (*Tensor, error) {
	raw := m.RawMatrix()
	if raw.Rows == 0 || raw.Cols == 0 {
		return &Tensor{dtype: Float64, shape: Shape{raw.Rows, raw.Cols}, data: []byte{}}, nil
	}
	if raw.Stride != raw.Cols && raw.Rows > 1 {
		return nil, fmt.Errorf("%w: %d×%d matrix with row stride %d", ErrNotContiguous, raw.Rows, raw.Cols, raw.Stride)
	}
	n := raw.Rows * raw.Cols
	return &Tensor{dtype: Float64, shape: Shape{raw.Rows, raw.Cols}, data: asBytes(raw.Data[:n:n])}, nil
}

// FromVecDense returns a one-dimensional Float64 tensor that shares v's
// storage. It returns an error wrapping ErrNotContiguous if v's increment is
// not 1 (a column view of a matrix, for example).
func FromVecDense(v *mat.VecDense) (*Tensor, error) {
	raw := v.RawVector()
	if raw.N == 0 {
		return &Tensor{dtype: Float64, shape: Shape{0}, data: []byte{}}, nil
	}
	if raw.Inc != 1 && raw.N > 1 {
		return nil, fmt.Errorf("%w: vector of %d elements with increment %d", ErrNotContiguous, raw.N, raw.Inc)
	}
	return &Tensor{dtype: Float64, shape: Shape{raw.N}, data: asBytes(raw.Data[:raw.N:raw.N])}, nil
}

// FromMatrix copies any gonum matrix into a new Float64 tensor of shape
// [rows, cols].
func FromMatrix(m mat.Matrix) *Tensor {
	r, c := m.Dims()
	t := New(Float64, r, c)
	s := t.Float64s()
	if d, ok := m.(*mat.Dense); ok {
		raw := d.RawMatrix()
		for i := 0; i < r; i++ {
			copy(s[i*c:(i+1)*c], raw.Data[i*raw.Stride:i*raw.Stride+c])
		}
		return t
	}
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			s[i*c+j] = m.At(i, j)
		}
	}
	return t
}

// ToDense returns a matrix that shares the storage of a Float64 host
// tensor. A tensor of shape [r, c] gives an r×c matrix; a vector of n
// elements gives an n×1 column (gonum's convention for vectors); a scalar
// gives 1×1; higher ranks are flattened to shape[0] × (the product of the
// rest). It returns an error for another dtype, a device tensor, or a
// tensor with no elements (gonum has no empty matrix constructor).
func ToDense(t *Tensor) (*mat.Dense, error) {
	s, err := gonumView(t)
	if err != nil {
		return nil, err
	}
	r, c := 1, 1
	switch len(t.shape) {
	case 0:
	case 1:
		r = t.shape[0]
	default:
		r, c = t.shape[0], t.RowSize()
	}
	return mat.NewDense(r, c, s), nil
}

// ToVecDense returns a vector that shares the storage of a Float64 host
// tensor of any shape, flattened in row-major order. It returns an error for
// another dtype, a device tensor or an empty tensor.
func ToVecDense(t *Tensor) (*mat.VecDense, error) {
	s, err := gonumView(t)
	if err != nil {
		return nil, err
	}
	return mat.NewVecDense(len(s), s), nil
}

func gonumView(t *Tensor) ([]float64, error) {
	switch {
	case t.dtype != Float64:
		return nil, fmt.Errorf("tensor: gonum matrices hold float64, not %v", t.dtype)
	case t.device.Kind != CPU:
		return nil, fmt.Errorf("tensor: gonum view of a %v tensor", t.device)
	case t.Len() == 0:
		return nil, fmt.Errorf("%w: gonum cannot view an empty tensor of shape %v", ErrShape, t.shape)
	}
	s := View[float64](t)
	return s[:len(s):len(s)], nil
}
