package optim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func roundTrip(t *testing.T, src []float32) ([]float32, float32, float32) {
	t.Helper()
	q := make([]byte, len(src))
	lo, hi, err := QuantizeMinMaxUint8(src, q)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(src))
	DequantizeMinMaxUint8(q, lo, hi, out)
	return out, lo, hi
}

func TestQuantizeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name   string
		n      int
		center float64
		spread float64
	}{
		{"unit", 1000, 0, 1}, {"offset", 777, 50, 0.01}, {"wide", 513, 0, 1e6}, {"tiny", 300, 1, 1e-9}, {"one", 1, 3, 1},
	} {
		src := make([]float32, c.n)
		for i := range src {
			src[i] = float32(c.center + c.spread*r.NormFloat64())
		}
		out, lo, hi := roundTrip(t, src)
		bound := float64(hi-lo+quantizeEpsilon) / 510 // half a step: rounded to nearest
		for i := range src {
			slack := 4 * ulp(max(abs32(src[i]), abs32(lo), abs32(hi))) // float32 arithmetic
			if d := math.Abs(float64(out[i] - src[i])); d > bound+slack {
				t.Fatalf("%s: element %d: %v came back as %v (off by %g, bound %g)", c.name, i, src[i], out[i], d, bound)
			}
		}
		if lo != slicesMin(src) || hi != slicesMax(src) {
			t.Fatalf("%s: min %v max %v, want %v %v", c.name, lo, hi, slicesMin(src), slicesMax(src))
		}
	}
}

// ulp is the distance from x (>= 0) to the next float32.
func ulp(x float32) float64 { return float64(math.Nextafter32(x, float32(math.Inf(1))) - x) }

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }

func slicesMin(xs []float32) float32 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func slicesMax(xs []float32) float32 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func TestQuantizeExact(t *testing.T) {
	for _, src := range [][]float32{
		{2.5, 2.5, 2.5}, {-7, -7}, {0, 0, 0}, {1e30, 1e30}, {float32(math.Copysign(0, -1)), 0},
	} {
		out, _, _ := roundTrip(t, src)
		for i := range src {
			if out[i] != src[i] { // -0 == +0
				t.Fatalf("%v came back as %v", src, out)
			}
		}
	}
	// The extremes of a chunk come back exactly.
	out, _, _ := roundTrip(t, []float32{-1, 0.3, 1})
	if out[0] != -1 || math.Abs(float64(out[2]-1)) > 1e-6 {
		t.Fatalf("extremes came back as %v", out)
	}
	if _, lo, hi := roundTrip(t, nil); lo != 0 || hi != 0 {
		t.Fatalf("empty: %v %v", lo, hi)
	}
}

func TestQuantizeRefuses(t *testing.T) {
	for _, c := range []struct {
		src  []float32
		dst  int
		want string
	}{
		{[]float32{1, float32(math.NaN())}, 2, "element 1 is NaN"},
		{[]float32{float32(math.Inf(1)), 1}, 2, "element 0 is +Inf"},
		{[]float32{float32(math.Inf(-1))}, 1, "element 0 is -Inf"},
		{[]float32{-3e38, 3e38}, 2, "overflows float32"},
		{[]float32{1, 2}, 3, "3 bytes for 2 elements"},
	} {
		_, _, err := QuantizeMinMaxUint8(c.src, make([]byte, c.dst))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.src, err, c.want)
		}
	}
}

func BenchmarkQuantizeMinMaxUint8(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 16, 1 << 20} {
		src, dst := make([]float32, n), make([]byte, n)
		for i := range src {
			src[i] = float32(i%1000) * 1e-3
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := QuantizeMinMaxUint8(src, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
