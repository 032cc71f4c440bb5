package cuda_test

import (
	"fmt"

	"github.com/gohorovod/gohorovod/cuda"
	"github.com/gohorovod/gohorovod/tensor"
)

// A staging round trip through the fake device: the same calls work on a
// *cuda.GPU from Runtime.OpenDevice.
func ExampleFake() {
	var d cuda.Device = cuda.NewFake(cuda.FakeConfig{})
	x, err := cuda.ToDevice(d, tensor.FromFloat32([]float32{1, 2, 3}))
	if err != nil {
		panic(err)
	}
	fmt.Println(x)
	back, _ := cuda.ToHost(d, x)
	fmt.Println(back.Float32s())
	_ = cuda.FreeTensor(d, x)
	fmt.Println(d.Close())
	// Output:
	// Tensor(float32, [3], GPU)
	// [1 2 3]
	// <nil>
}
