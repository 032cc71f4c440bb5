// Package tensor holds the data that gohorovod moves between ranks: element
// types (DType), shapes, and Tensor, a typed view over contiguous host storage
// (with room for a device pointer), together with the kernels the runtime
// needs on that storage: elementwise reductions (sum, min, max, product and
// bitwise and/or) into a destination, scaling by a factor, and conversion
// between float32 and the two half-precision formats.
//
// The element types are Horovod's (uint8, int8, uint16, int16, int32,
// int64, float16, float32, float64, bool) plus bfloat16 and uint64. A Bool
// element is one byte, 0 for false and 1 for true, so a []bool is its
// storage; its reductions are logical ("or" for sum and max, "and" for min
// and product).
//
// Constructors such as FromFloat32 wrap a Go slice without copying it, and
// typed accessors (Float32s, Int64s, ...) give the slice back, so a training
// loop can hand its own gradient slices to the runtime and read the reduced
// values in place.
//
// The kernels run 256-bit AVX2/F16C loops on amd64 CPUs that have them
// (build with -tags purego for the portable Go loops alone). FromDense,
// FromVecDense, ToDense and ToVecDense share storage with gonum matrices and
// vectors when it is contiguous; FromMatrix copies.
//
// Hot kernels panic, with a "tensor: " prefix, on programmer errors such as
// mismatched lengths; functions that validate input from elsewhere return
// errors.
package tensor
