package gomlxopt

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/x448/float16"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// hvdDType is the runtime's element type of a GoMLX dtype that can be
// reduced.
func hvdDType(dt dtypes.DType) (tensor.DType, bool) {
	switch dt {
	case dtypes.Float32:
		return tensor.Float32, true
	case dtypes.Float64:
		return tensor.Float64, true
	case dtypes.Float16:
		return tensor.Float16, true
	case dtypes.BFloat16:
		return tensor.BFloat16, true
	}
	return tensor.Invalid, false
}

// bytesOf copies t's storage.
func bytesOf(t *tensors.Tensor) ([]byte, error) {
	var out []byte
	err := t.ConstBytes(func(b []byte) { out = append([]byte(nil), b...) })
	if err != nil {
		return nil, fmt.Errorf("gomlxopt: reading a tensor: %w", err)
	}
	return out, nil
}

// toHost copies a gradient into a flat runtime tensor of its dtype.
func toHost(g *tensors.Tensor) (*tensor.Tensor, error) {
	dt, ok := hvdDType(g.DType())
	if !ok {
		return nil, fmt.Errorf("gomlxopt: gradients of dtype %s cannot be reduced", g.DType())
	}
	b, err := bytesOf(g)
	if err != nil {
		return nil, err
	}
	return tensor.FromBytes(dt, b, g.Shape().Size())
}

// fromHost makes the GoMLX tensor of shape shape from a reduced gradient:
// full when the gradient travelled compressed, else wire's bytes.
func fromHost(wire *tensor.Tensor, full []float32, shape shapes.Shape) (*tensors.Tensor, error) {
	if full != nil {
		return tensors.FromFlatDataAndDimensions(full, shape.Dimensions...), nil
	}
	out := tensors.FromShape(shape)
	if err := out.MutableBytes(func(b []byte) { copy(b, wire.Bytes()) }); err != nil {
		return nil, fmt.Errorf("gomlxopt: writing a gradient: %w", err)
	}
	return out, nil
}

// compress casts a float32 gradient to the wire's half type.
func compress(full []float32, c optim.Compression) *tensor.Tensor {
	if c == optim.BF16 {
		h := make([]tensor.BFloat16Bits, len(full))
		tensor.Float32ToBFloat16(h, full)
		return tensor.From(h, len(h))
	}
	h := make([]tensor.Float16Bits, len(full))
	tensor.Float32ToFloat16(h, full)
	return tensor.From(h, len(h))
}

// decompress casts the reduced half gradient back into full.
func decompress(full []float32, wire *tensor.Tensor) {
	if wire.DType() == tensor.BFloat16 {
		tensor.BFloat16ToFloat32(full, tensor.View[tensor.BFloat16Bits](wire))
		return
	}
	tensor.Float16ToFloat32(full, tensor.View[tensor.Float16Bits](wire))
}

// hostCopy copies a variable's value as bytes (broadcast moves bytes, so
// every dtype travels).
func hostCopy(v *mlctx.Variable) (*tensor.Tensor, error) {
	val, err := v.Value()
	if err != nil {
		return nil, fmt.Errorf("gomlxopt: variable %s: %w", v.ScopeAndName(), err)
	}
	b, err := bytesOf(val)
	if err != nil {
		return nil, err
	}
	return tensor.FromUint8(b, len(b)), nil
}

// setFromBytes sets a variable to a value of its shape holding b.
func setFromBytes(v *mlctx.Variable, b []byte) error {
	val := tensors.FromShape(v.Shape())
	n := 0
	if err := val.MutableBytes(func(dst []byte) { n = copy(dst, b) }); err != nil {
		return fmt.Errorf("gomlxopt: variable %s: %w", v.ScopeAndName(), err)
	}
	if n != len(b) {
		return fmt.Errorf("gomlxopt: variable %s holds %d bytes, got %d", v.ScopeAndName(), n, len(b))
	}
	if err := v.SetValue(val); err != nil {
		return fmt.Errorf("gomlxopt: variable %s: %w", v.ScopeAndName(), err)
	}
	return nil
}

// scalar reads a scalar tensor as a float64.
func scalar(t *tensors.Tensor) (float64, error) {
	switch x := t.Value().(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	case float16.Float16:
		return float64(x.Float32()), nil
	case bfloat16.BFloat16:
		return float64(x.Float32()), nil
	case int64:
		return float64(x), nil
	case int32:
		return float64(x), nil
	}
	return 0, fmt.Errorf("gomlxopt: %s is not a float scalar", t.Shape())
}

// tensorOfDType is the scalar x as a tensor of dtype dt.
func tensorOfDType(dt dtypes.DType, x float64) (*tensors.Tensor, error) {
	switch dt {
	case dtypes.Float32:
		return tensors.FromScalar(float32(x)), nil
	case dtypes.Float64:
		return tensors.FromScalar(x), nil
	case dtypes.Float16:
		return tensors.FromScalar(float16.Fromfloat32(float32(x))), nil
	case dtypes.BFloat16:
		return tensors.FromScalar(bfloat16.FromFloat32(float32(x))), nil
	}
	return nil, fmt.Errorf("gomlxopt: a learning rate of dtype %s", dt)
}
