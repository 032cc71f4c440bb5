package tensor

import (
	"slices"
	"testing"
)

func TestDTypeNumberingIsStable(t *testing.T) {
	// The runtime's wire format and the mpi package's C codes use these
	// numbers: appending is fine, moving is not.
	want := []DType{Float32, Float64, Float16, BFloat16, Int8, Uint8, Int32, Int64, Uint64, Int16, Uint16, Bool}
	for i, dt := range want {
		if int(dt) != i+1 {
			t.Errorf("%v = %d, want %d", dt, dt, i+1)
		}
	}
	if !slices.Equal(DTypes(), want) {
		t.Errorf("DTypes() = %v, want %v", DTypes(), want)
	}
	for dt, size := range map[DType]int{Int16: 2, Uint16: 2, Bool: 1} {
		if dt.Size() != size || dt.IsFloat() || !dt.Valid() {
			t.Errorf("%v: size %d float %v valid %v", dt, dt.Size(), dt.IsFloat(), dt.Valid())
		}
	}
}

func TestNewTypedViews(t *testing.T) {
	i16 := FromInt16([]int16{-3, 7}, 2, 1)
	if i16.DType() != Int16 || !i16.Shape().Equal(Shape{2, 1}) || i16.Int16s()[0] != -3 {
		t.Errorf("FromInt16: %v %v", i16, i16.Int16s())
	}
	u16 := FromUint16([]uint16{65535})
	if u16.DType() != Uint16 || u16.Uint16s()[0] != 65535 || u16.NumBytes() != 2 {
		t.Errorf("FromUint16: %v %v", u16, u16.Uint16s())
	}
	b := FromBool([]bool{true, false, true})
	if b.DType() != Bool || !slices.Equal(b.Bytes(), []byte{1, 0, 1}) || !slices.Equal(b.Bools(), []bool{true, false, true}) {
		t.Errorf("FromBool: %v % x", b, b.Bytes())
	}
	if FromInt8([]int8{-1}).Int8s()[0] != -1 || FromUint8([]uint8{200}).Uint8s()[0] != 200 {
		t.Error("FromInt8/FromUint8 round trip")
	}
	if got := DTypeOf[bool](); got != Bool {
		t.Errorf("DTypeOf[bool] = %v", got)
	}
}

func TestReduceBoolIsLogical(t *testing.T) {
	a := []bool{false, false, true, true}
	b := []bool{false, true, false, true}
	for _, tc := range []struct {
		op   ReduceOp
		want []bool
	}{
		{Sum, []bool{false, true, true, true}},
		{Max, []bool{false, true, true, true}},
		{BitOr, []bool{false, true, true, true}},
		{Min, []bool{false, false, false, true}},
		{Product, []bool{false, false, false, true}},
		{BitAnd, []bool{false, false, false, true}},
	} {
		forEachKernelPath(t, func(t *testing.T) {
			// Long enough for the vector loop: 8 copies of the truth table.
			var dst, src []bool
			for range 8 {
				dst, src = append(dst, a...), append(src, b...)
			}
			Reduce(Bool, tc.op, FromBool(dst).Bytes(), FromBool(src).Bytes())
			for i, v := range dst {
				if v != tc.want[i%4] {
					t.Fatalf("%v: element %d = %v, want %v", tc.op, i, v, tc.want[i%4])
				}
			}
		})
	}
	// Scaling keeps true unless the factor is 0.
	s := FromBool([]bool{true, false})
	ScaleTensor(s, 0.5)
	if !slices.Equal(s.Bools(), []bool{true, false}) {
		t.Errorf("scale 0.5 gave %v", s.Bools())
	}
	ScaleTensor(s, 0)
	if !slices.Equal(s.Bools(), []bool{false, false}) {
		t.Errorf("scale 0 gave %v", s.Bools())
	}
}

func TestReduce16BitIntegers(t *testing.T) {
	forEachKernelPath(t, func(t *testing.T) {
		n := 40 // a vector block and a tail
		d, s := make([]int16, n), make([]int16, n)
		for i := range d {
			d[i], s[i] = int16(i*1000-20000), int16(30000-i*7)
		}
		sum := slices.Clone(d)
		Reduce(Int16, Sum, FromInt16(sum).Bytes(), FromInt16(s).Bytes())
		mx := slices.Clone(d)
		Reduce(Int16, Max, FromInt16(mx).Bytes(), FromInt16(s).Bytes())
		for i := range d {
			if sum[i] != d[i]+s[i] || mx[i] != max(d[i], s[i]) {
				t.Fatalf("int16 element %d: sum %d max %d", i, sum[i], mx[i])
			}
		}
		u, v := make([]uint16, n), make([]uint16, n)
		for i := range u {
			u[i], v[i] = uint16(i*2000), uint16(65000-i)
		}
		mn := slices.Clone(u)
		Reduce(Uint16, Min, FromUint16(mn).Bytes(), FromUint16(v).Bytes())
		pr := slices.Clone(u)
		Reduce(Uint16, Product, FromUint16(pr).Bytes(), FromUint16(v).Bytes())
		for i := range u {
			if mn[i] != min(u[i], v[i]) || pr[i] != u[i]*v[i] {
				t.Fatalf("uint16 element %d: min %d product %d", i, mn[i], pr[i])
			}
		}
	})
}
