package optim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMinMaxUint8RoundTrip: every value comes back within (max−min)/255
// of itself, the extremes are the chunk's, min quantizes to 0 and, where
// the range dwarfs ε, max to 255.
func TestMinMaxUint8RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 17, 256, 4099} {
		for _, spread := range []float64{1e-6, 1, 1e3, 1e30} {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32((rng.Float64()*2 - 0.5) * spread)
			}
			q := make([]byte, n)
			lo, hi, err := QuantizeMinMaxUint8(src, q)
			if err != nil {
				t.Fatal(err)
			}
			back := make([]float32, n)
			DequantizeMinMaxUint8(q, lo, hi, back)
			tol := (float64(hi) - float64(lo)) / 255
			for i, v := range src {
				if v < lo || v > hi {
					t.Fatalf("n %d: %v outside [%v, %v]", n, v, lo, hi)
				}
				if d := math.Abs(float64(back[i]) - float64(v)); d > tol {
					t.Fatalf("n %d spread %g: element %d: %v came back as %v (off by %g > %g)", n, spread, i, v, back[i], d, tol)
				}
				if v == lo && q[i] != 0 || hi-lo > 1e-3 && v == hi && q[i] != 255 {
					t.Fatalf("n %d: extreme %v quantized to %d", n, v, q[i])
				}
			}
		}
	}
}

// TestMinMaxUint8Exact: constant chunks (zeros of either sign included)
// come back bit for bit; an empty chunk is min = max = 0.
func TestMinMaxUint8Exact(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []float32{0, negZero, 1, -3.5, 1e-40, math.MaxFloat32, -math.MaxFloat32} {
		src := []float32{c, c, c, c, c}
		q := make([]byte, len(src))
		lo, hi, err := QuantizeMinMaxUint8(src, q)
		if err != nil {
			t.Fatal(err)
		}
		back := make([]float32, len(src))
		DequantizeMinMaxUint8(q, lo, hi, back)
		for i := range src {
			if math.Float32bits(back[i]) != math.Float32bits(c) {
				t.Fatalf("constant %v: element %d came back as %v", c, i, back[i])
			}
		}
	}
	if lo, hi, err := QuantizeMinMaxUint8(nil, nil); lo != 0 || hi != 0 || err != nil {
		t.Fatalf("empty chunk: %v %v %v", lo, hi, err)
	}
	// The full float32 range does not overflow the scale.
	src := []float32{-math.MaxFloat32, 0, math.MaxFloat32}
	q := make([]byte, 3)
	lo, hi, err := QuantizeMinMaxUint8(src, q)
	if err != nil || q[0] != 0 || q[2] != 255 || lo != src[0] || hi != src[2] {
		t.Fatalf("full range: %v %v %v %v", q, lo, hi, err)
	}
	back := make([]float32, 3)
	DequantizeMinMaxUint8(q, lo, hi, back)
	for i, v := range back {
		if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			t.Fatalf("full range: element %d came back as %v", i, v)
		}
	}
}

// TestMinMaxUint8RefusesNonFinite: NaN and ±Inf are refused with
// ErrNotFinite, naming the element.
func TestMinMaxUint8RefusesNonFinite(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		src := []float32{1, 2, bad, 4}
		_, _, err := QuantizeMinMaxUint8(src, make([]byte, 4))
		if !errors.Is(err, ErrNotFinite) {
			t.Fatalf("%v: got %v, want ErrNotFinite", bad, err)
		}
		if want := "element 2"; !strings.Contains(err.Error(), want) {
			t.Fatalf("%v: %q does not name %q", bad, err, want)
		}
	}
}

// BenchmarkQuantizeMinMaxUint8 quantizes and dequantizes chunks of a
// ladder of sizes.
func BenchmarkQuantizeMinMaxUint8(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 16, 1 << 20} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i%977) * 0.01
		}
		q, back := make([]byte, n), make([]float32, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			b.ReportAllocs()
			for range b.N {
				lo, hi, _ := QuantizeMinMaxUint8(src, q)
				DequantizeMinMaxUint8(q, lo, hi, back)
			}
		})
	}
}
