package tensor

import "testing"

func TestNewFlatPartsAreViewsInOrder(t *testing.T) {
	flat, parts := NewFlat(Float32, Shape{2, 3}, Shape{}, Shape{0}, Shape{4})
	if flat.Len() != 11 || len(parts) != 4 {
		t.Fatalf("flat holds %d elements in %d parts, want 11 in 4", flat.Len(), len(parts))
	}
	for i, want := range []Shape{{2, 3}, {}, {0}, {4}} {
		if !parts[i].Shape().Equal(want) {
			t.Errorf("part %d has shape %v, want %v", i, parts[i].Shape(), want)
		}
	}
	parts[0].Float32s()[5] = 1
	parts[1].Float32s()[0] = 2
	parts[3].Float32s()[0] = 3
	if got := flat.Float32s(); got[5] != 1 || got[6] != 2 || got[7] != 3 {
		t.Errorf("writes through the parts landed at the wrong places: %v", got)
	}
}

func TestFollows(t *testing.T) {
	_, p := NewFlat(Float64, Shape{3}, Shape{0}, Shape{2}, Shape{1})
	s := make([]float32, 10)
	a, b, c := FromFloat32(s[:4]), FromFloat32(s[4:6]), FromFloat32(s[7:])
	capped := FromFloat32(s[:4:4])
	tests := []struct {
		name string
		b, a *Tensor
		want bool
	}{
		{"across an empty part", p[2], p[0], true},
		{"neighbouring parts", p[3], p[2], true},
		{"an empty tensor follows nothing", p[1], p[0], false},
		{"wrong order", p[0], p[2], false},
		{"not adjacent", p[3], p[0], false},
		{"subslices of one slice", b, a, true},
		{"a gap between subslices", c, b, false},
		{"capacity cut at the end", b, capped, false},
		{"separate allocations", New(Float32, 2), New(Float32, 2), false},
		{"a device tensor", NewDevice(Float32, Device{Kind: GPU}, 4096, 2), a, false},
	}
	for _, tt := range tests {
		if got := Follows(tt.b, tt.a); got != tt.want {
			t.Errorf("%s: Follows = %v, want %v", tt.name, got, tt.want)
		}
	}
}
