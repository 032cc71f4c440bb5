package tensor

import (
	"errors"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func TestFromDenseSharesStorage(t *testing.T) {
	m := mat.NewDense(2, 3, []float64{1, 2, 3, 4, 5, 6})
	x, err := FromDense(m)
	if err != nil {
		t.Fatal(err)
	}
	if !x.Shape().Equal(Shape{2, 3}) || x.DType() != Float64 {
		t.Fatalf("FromDense gives %v", x)
	}
	x.Float64s()[4] = 50 // row 1, column 1
	if m.At(1, 1) != 50 {
		t.Fatalf("write through the tensor not seen by the matrix: %v", m.At(1, 1))
	}
	m.Set(0, 2, 30)
	if x.Float64s()[2] != 30 {
		t.Fatalf("write through the matrix not seen by the tensor")
	}
	// Reducing into the tensor updates the matrix in place.
	if err := ReduceInto(x, FromFloat64([]float64{1, 1, 1, 1, 1, 1}, 2, 3), Sum); err != nil {
		t.Fatal(err)
	}
	if m.At(0, 0) != 2 || m.At(1, 2) != 7 {
		t.Fatalf("matrix after reduce = %v", mat.Formatted(m))
	}
}

func TestFromDenseViews(t *testing.T) {
	m := mat.NewDense(3, 3, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9})
	tests := []struct {
		name   string
		m      *mat.Dense
		shape  Shape
		values []float64
		err    error
	}{
		{"rows 1-2, all columns (contiguous)", m.Slice(1, 3, 0, 3).(*mat.Dense), Shape{2, 3}, []float64{4, 5, 6, 7, 8, 9}, nil},
		{"one row, some columns (contiguous)", m.Slice(1, 2, 1, 3).(*mat.Dense), Shape{1, 2}, []float64{5, 6}, nil},
		{"columns 0-1 (strided)", m.Slice(0, 3, 0, 2).(*mat.Dense), nil, nil, ErrNotContiguous},
		{"empty", &mat.Dense{}, Shape{0, 0}, []float64{}, nil},
	}
	for _, tc := range tests {
		x, err := FromDense(tc.m)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "stride 3") {
				t.Errorf("%s: error %q does not give the stride", tc.name, err)
			}
			// The copying variant accepts what FromDense refuses.
			c := FromMatrix(tc.m)
			if got := c.Float64s(); !c.Shape().Equal(Shape{3, 2}) || got[0] != 1 || got[1] != 2 || got[2] != 4 || got[5] != 8 {
				t.Errorf("%s: FromMatrix = %v %v", tc.name, c.Shape(), got)
			}
			continue
		}
		if !x.Shape().Equal(tc.shape) {
			t.Errorf("%s: shape %v, want %v", tc.name, x.Shape(), tc.shape)
		}
		got := x.Float64s()
		if len(got) != len(tc.values) {
			t.Fatalf("%s: %d values, want %d", tc.name, len(got), len(tc.values))
		}
		for i := range got {
			if got[i] != tc.values[i] {
				t.Errorf("%s: values %v, want %v", tc.name, got, tc.values)
				break
			}
		}
		if cap(got) != len(got) {
			t.Errorf("%s: view has spare capacity %d, appends could overwrite the matrix", tc.name, cap(got))
		}
	}
}

func TestFromMatrixCopies(t *testing.T) {
	m := mat.NewDense(2, 3, []float64{1, 2, 3, 4, 5, 6})
	x := FromMatrix(m.T()) // a transpose is not a *mat.Dense
	want := []float64{1, 4, 2, 5, 3, 6}
	got := x.Float64s()
	if !x.Shape().Equal(Shape{3, 2}) {
		t.Fatalf("shape %v", x.Shape())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("FromMatrix(m.T()) = %v, want %v", got, want)
		}
	}
	got[0] = 100
	if m.At(0, 0) != 1 {
		t.Fatal("FromMatrix shares storage")
	}
}

func TestVecDense(t *testing.T) {
	v := mat.NewVecDense(4, []float64{1, 2, 3, 4})
	x, err := FromVecDense(v)
	if err != nil {
		t.Fatal(err)
	}
	x.Float64s()[3] = 40
	if v.AtVec(3) != 40 || !x.Shape().Equal(Shape{4}) {
		t.Fatalf("FromVecDense: %v, v[3] = %v", x, v.AtVec(3))
	}
	m := mat.NewDense(2, 2, []float64{1, 2, 3, 4})
	col := m.ColView(1).(*mat.VecDense)
	if _, err := FromVecDense(col); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("column view: err = %v, want ErrNotContiguous", err)
	}
	y, err := ToVecDense(FromFloat64([]float64{1, 2, 3, 4, 5, 6}, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if y.Len() != 6 || y.AtVec(5) != 6 {
		t.Fatalf("ToVecDense = %v", mat.Formatted(y))
	}
}

func TestToDense(t *testing.T) {
	data := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	tests := []struct {
		name string
		t    *Tensor
		r, c int
		err  string
	}{
		{"matrix", FromFloat64(data[:6], 2, 3), 2, 3, ""},
		{"vector is a column", FromFloat64(data[:5]), 5, 1, ""},
		{"scalar", scalar(data[:1]), 1, 1, ""},
		{"rank 3 flattens", FromFloat64(data, 2, 2, 3), 2, 6, ""},
		{"float32", FromFloat32(make([]float32, 4), 2, 2), 0, 0, "float64, not float32"},
		{"empty", FromFloat64(nil, 0, 3), 0, 0, "empty"},
		{"device", NewDevice(Float64, Device{Kind: GPU, Index: 1}, 1, 2, 2), 0, 0, "GPU:1"},
	}
	for _, tc := range tests {
		m, err := ToDense(tc.t)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want one mentioning %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r, c := m.Dims(); r != tc.r || c != tc.c {
			t.Errorf("%s: dims %d×%d, want %d×%d", tc.name, r, c, tc.r, tc.c)
		}
		m.Set(0, 0, -1)
		if tc.t.Float64s()[0] != -1 {
			t.Errorf("%s: matrix does not share the tensor's storage", tc.name)
		}
		tc.t.Float64s()[0] = 1
	}
}

func TestDenseRoundTrip(t *testing.T) {
	m := mat.NewDense(3, 2, []float64{1, 2, 3, 4, 5, 6})
	x, err := FromDense(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ToDense(x)
	if err != nil {
		t.Fatal(err)
	}
	if !mat.Equal(m, back) {
		t.Fatalf("round trip changed the matrix: %v", mat.Formatted(back))
	}
	back.Set(2, 1, 60)
	if m.At(2, 1) != 60 {
		t.Fatal("round trip copied the storage")
	}
}

// scalar returns a rank-0 tensor over s[0].
func scalar(s []float64) *Tensor {
	x, err := FromFloat64(s[:1]).Reshape()
	if err != nil {
		panic(err)
	}
	return x
}
