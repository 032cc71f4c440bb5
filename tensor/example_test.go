package tensor_test

import (
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/tensor"
	"gonum.org/v1/gonum/mat"
)

// Summing one rank's gradient into another's, the step an allreduce repeats.
func ExampleReduceInto() {
	acc := tensor.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	grad := tensor.FromFloat32([]float32{10, 20, 30, 40}, 2, 2)
	if err := tensor.ReduceInto(acc, grad, tensor.Sum); err != nil {
		fmt.Println(err)
	}
	fmt.Println(acc.Float32s())
	// The tensors must agree in dtype and size.
	err := tensor.ReduceInto(acc, tensor.FromFloat64([]float64{1}), tensor.Sum)
	fmt.Println(err)
	// Output:
	// [11 22 33 44]
	// tensor: reduce of float64 into float32
}

// Reduce works on raw bytes, as they arrive from the network, for every dtype.
func ExampleReduce() {
	dst := []int32{5, -3, 8}
	src := []int32{2, 7, 8}
	tensor.Reduce(tensor.Int32, tensor.Max, tensor.From(dst).Bytes(), tensor.From(src).Bytes())
	fmt.Println(dst)

	words := []uint64{0b1011, 0b0110}
	tensor.Reduce(tensor.Uint64, tensor.BitAnd, tensor.From(words).Bytes(), tensor.From([]uint64{0b0011, 0b1110}).Bytes())
	fmt.Printf("%04b\n", words)
	// Output:
	// [5 7 8]
	// [0011 0110]
}

// Half-precision values are combined in float32 and rounded once.
func ExampleReduce_float16() {
	a := []tensor.Float16Bits{tensor.MakeFloat16(0.1), tensor.MakeFloat16(2048)}
	b := []tensor.Float16Bits{tensor.MakeFloat16(0.2), tensor.MakeFloat16(1)}
	tensor.Reduce(tensor.Float16, tensor.Sum, tensor.From(a).Bytes(), tensor.From(b).Bytes())
	fmt.Println(a[0].Float32(), a[1].Float32()) // 2048+1 ties to even: 2048
	// Output:
	// 0.2998047 2048
}

// Scale turns a sum into an average, as Horovod's Average does: floats in
// their own precision, integers truncated toward zero.
func ExampleScale() {
	sum := []float32{4, 6, 9}
	tensor.ScaleTensor(tensor.FromFloat32(sum), 1.0/2)
	fmt.Println(sum)

	counts := []int64{7, -7, 9}
	tensor.Scale(tensor.Int64, tensor.From(counts).Bytes(), 0.5)
	fmt.Println(counts)
	// Output:
	// [2 3 4.5]
	// [3 -3 4]
}

func ExampleFloat32ToFloat16() {
	src := []float32{1, 0.1, 65504, 70000, 1e-7}
	half := make([]tensor.Float16Bits, len(src))
	tensor.Float32ToFloat16(half, src)
	back := make([]float32, len(src))
	tensor.Float16ToFloat32(back, half)
	fmt.Printf("%#04x\n", half)
	fmt.Println(back)
	// Output:
	// [0x3c00 0x2e66 0x7bff 0x7c00 0x0002]
	// [1 0.099975586 65504 +Inf 1.1920929e-07]
}

func ExampleFloat32ToBFloat16() {
	src := []float32{1, 0.1, 3.14159}
	bf := make([]tensor.BFloat16Bits, len(src))
	tensor.Float32ToBFloat16(bf, src)
	back := make([]float32, len(src))
	tensor.BFloat16ToFloat32(back, bf)
	fmt.Println(back)
	// Output:
	// [1 0.100097656 3.140625]
}

// A contiguous gonum matrix becomes a tensor without a copy, so a reduction
// lands in the matrix.
func ExampleFromDense() {
	m := mat.NewDense(2, 2, []float64{1, 2, 3, 4})
	t, err := tensor.FromDense(m)
	if err != nil {
		fmt.Println(err)
		return
	}
	tensor.ScaleTensor(t, 10)
	fmt.Println(t.Shape(), mat.Formatted(m, mat.Squeeze()))

	// A column slice of a wider matrix is not contiguous: copy it instead.
	wide := mat.NewDense(2, 3, []float64{1, 2, 3, 4, 5, 6})
	_, err = tensor.FromDense(wide.Slice(0, 2, 0, 2).(*mat.Dense))
	fmt.Println(errors.Is(err, tensor.ErrNotContiguous), tensor.FromMatrix(wide.Slice(0, 2, 0, 2)).Float64s())
	// Output:
	// [2, 2] ⎡10  20⎤
	// ⎣30  40⎦
	// true [1 2 4 5]
}

func ExampleToDense() {
	t := tensor.FromFloat64([]float64{1, 2, 3, 4, 5, 6}, 2, 3)
	m, err := tensor.ToDense(t)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(mat.Sum(m), m.At(1, 2))
	// Output:
	// 21 6
}
