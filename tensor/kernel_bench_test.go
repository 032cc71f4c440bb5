package tensor

import (
	"fmt"
	"testing"

	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/floats"
)

// Benchmarks at a ladder of sizes. SetBytes counts the memory traffic of one
// call: a reduction reads dst and src and writes dst (3 buffers), a scale
// reads and writes its buffer (2), a conversion reads one and writes the
// other. Every benchmark also reports Gelem/s, elements per nanosecond.
//
// The 1K to 64K sizes stay in L2 (a float32 pair at 64K is 512 KiB); 1M
// falls to L3 and 16M to main memory.

var benchSizes = []int{1 << 10, 16 << 10, 64 << 10, 1 << 20, 16 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dM", n>>20)
	}
	return fmt.Sprintf("%dK", n>>10)
}

func reportElems(b *testing.B, n int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/s/1e9, "Gelem/s")
	}
}

// benchBuffers returns dst and src holding n elements of dt with values that
// keep repeated sums finite and normal (no subnormal slow paths).
func benchBuffers(dt DType, n int) (dst, src []byte) {
	dst, src = make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		a, c := float32(1+i%7), float32(i%5)*1e-3
		switch dt {
		case Float32:
			fromBytes[float32](dst)[i], fromBytes[float32](src)[i] = a, c
		case Float64:
			fromBytes[float64](dst)[i], fromBytes[float64](src)[i] = float64(a), float64(c)
		case Float16:
			fromBytes[Float16Bits](dst)[i], fromBytes[Float16Bits](src)[i] = MakeFloat16(a), MakeFloat16(c)
		case BFloat16:
			fromBytes[BFloat16Bits](dst)[i], fromBytes[BFloat16Bits](src)[i] = MakeBFloat16(a), MakeBFloat16(c)
		case Int32:
			fromBytes[int32](dst)[i], fromBytes[int32](src)[i] = int32(i), int32(i%5)
		}
	}
	return dst, src
}

// BenchmarkReduce measures tensor.Reduce, the entry point the runtime uses.
func BenchmarkReduce(b *testing.B) {
	cases := []struct {
		dt DType
		op ReduceOp
	}{
		{Float32, Sum}, {Float64, Sum}, {Float16, Sum}, {BFloat16, Sum}, {Int32, Sum}, {Float32, Max},
	}
	for _, c := range cases {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%v-%v/%s", c.dt, c.op, sizeName(n)), func(b *testing.B) {
				dst, src := benchBuffers(c.dt, n)
				b.SetBytes(int64(3 * len(dst)))
				b.ReportAllocs()
				for b.Loop() {
					Reduce(c.dt, c.op, dst, src)
				}
				reportElems(b, n)
			})
		}
	}
}

// plainSum is the loop a Go programmer would write; it is the baseline the
// vector kernel is measured against.
//
//go:noinline
func plainSum(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// BenchmarkSumFloat32 sets the float32 sum kernel beside the plain loop, the
// portable generic kernel and gonum's blas32.Axpy (alpha = 1), so that their
// ratios show in one run.
func BenchmarkSumFloat32(b *testing.B) {
	impls := []struct {
		name string
		f    func(dst, src []float32)
	}{
		{"kernel", func(dst, src []float32) { Reduce(Float32, Sum, asBytes(dst), asBytes(src)) }},
		{"plainloop", plainSum},
		{"generic", addGo[float32]},
		{"gonum-axpy", func(dst, src []float32) {
			blas32.Axpy(1, blas32.Vector{N: len(src), Data: src, Inc: 1}, blas32.Vector{N: len(dst), Data: dst, Inc: 1})
		}},
	}
	for _, im := range impls {
		for _, n := range benchSizes {
			b.Run(im.name+"/"+sizeName(n), func(b *testing.B) {
				d, s := benchBuffers(Float32, n)
				dst, src := fromBytes[float32](d), fromBytes[float32](s)
				b.SetBytes(int64(3 * len(d)))
				b.ReportAllocs()
				for b.Loop() {
					im.f(dst, src)
				}
				reportElems(b, n)
			})
		}
	}
}

// BenchmarkSumFloat64 does the same for float64, with gonum's floats.Add.
func BenchmarkSumFloat64(b *testing.B) {
	impls := []struct {
		name string
		f    func(dst, src []float64)
	}{
		{"kernel", func(dst, src []float64) { Reduce(Float64, Sum, asBytes(dst), asBytes(src)) }},
		{"generic", addGo[float64]},
		{"gonum-floats", floats.Add},
	}
	for _, im := range impls {
		for _, n := range benchSizes {
			b.Run(im.name+"/"+sizeName(n), func(b *testing.B) {
				d, s := benchBuffers(Float64, n)
				dst, src := fromBytes[float64](d), fromBytes[float64](s)
				b.SetBytes(int64(3 * len(d)))
				b.ReportAllocs()
				for b.Loop() {
					im.f(dst, src)
				}
				reportElems(b, n)
			})
		}
	}
}

// BenchmarkScale measures tensor.Scale by -1 (exact, so values neither grow
// nor shrink into subnormals), with gonum's Scal/Scale beside float32/64.
func BenchmarkScale(b *testing.B) {
	impls := []struct {
		name string
		dt   DType
		f    func(buf []byte)
	}{
		{"float32", Float32, func(buf []byte) { Scale(Float32, buf, -1) }},
		{"float64", Float64, func(buf []byte) { Scale(Float64, buf, -1) }},
		{"float16", Float16, func(buf []byte) { Scale(Float16, buf, -1) }},
		{"bfloat16", BFloat16, func(buf []byte) { Scale(BFloat16, buf, -1) }},
		{"float32-gonum", Float32, func(buf []byte) {
			s := fromBytes[float32](buf)
			blas32.Scal(-1, blas32.Vector{N: len(s), Data: s, Inc: 1})
		}},
		{"float64-gonum", Float64, func(buf []byte) { floats.Scale(-1, fromBytes[float64](buf)) }},
		{"float32-generic", Float32, func(buf []byte) { scaleGo(fromBytes[float32](buf), -1) }},
		{"float64-generic", Float64, func(buf []byte) { scaleGo(fromBytes[float64](buf), -1) }},
	}
	for _, im := range impls {
		for _, n := range benchSizes {
			b.Run(im.name+"/"+sizeName(n), func(b *testing.B) {
				buf, _ := benchBuffers(im.dt, n)
				b.SetBytes(int64(2 * len(buf)))
				b.ReportAllocs()
				for b.Loop() {
					im.f(buf)
				}
				reportElems(b, n)
			})
		}
	}
}

// BenchmarkConvert measures the half-precision conversions; the "-go" rows
// are the scalar bit-trick code that finishes tails and serves other CPUs.
func BenchmarkConvert(b *testing.B) {
	impls := []struct {
		name  string
		f     func(f []float32, h []uint16)
		sizes []int
	}{
		{"float16-to-float32", func(f []float32, h []uint16) { Float16ToFloat32(f, fromBytes[Float16Bits](asBytes(h))) }, benchSizes},
		{"float32-to-float16", func(f []float32, h []uint16) { Float32ToFloat16(fromBytes[Float16Bits](asBytes(h)), f) }, benchSizes},
		{"bfloat16-to-float32", func(f []float32, h []uint16) { BFloat16ToFloat32(f, fromBytes[BFloat16Bits](asBytes(h))) }, benchSizes},
		{"float32-to-bfloat16", func(f []float32, h []uint16) { Float32ToBFloat16(fromBytes[BFloat16Bits](asBytes(h)), f) }, benchSizes},
		{"float16-to-float32-go", func(f []float32, h []uint16) { f16to32Go(f, h) }, benchSizes[2:3]},
		{"float32-to-float16-go", func(f []float32, h []uint16) { f32to16Go(h, f) }, benchSizes[2:3]},
		{"float32-to-bfloat16-go", func(f []float32, h []uint16) { f32tobf16Go(h, f) }, benchSizes[2:3]},
	}
	for _, im := range impls {
		for _, n := range im.sizes {
			b.Run(im.name+"/"+sizeName(n), func(b *testing.B) {
				fb, _ := benchBuffers(Float32, n)
				f := fromBytes[float32](fb)
				h := make([]uint16, n)
				f32to16Go(h, f)
				b.SetBytes(int64(6 * n))
				b.ReportAllocs()
				for b.Loop() {
					im.f(f, h)
				}
				reportElems(b, n)
			})
		}
	}
}
