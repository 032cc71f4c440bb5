package fusion

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/internal/wire"
	"github.com/gohorovod/gohorovod/tensor"
)

func ar(name string, elems int64, dt tensor.DType) wire.Response {
	return wire.Response{Type: wire.ResponseType(wire.Allreduce), Names: []string{name}, DType: dt,
		Sizes: []int64{elems}, Shapes: [][]int64{{elems}}, Prescale: 1, Postscale: 1, Op: wire.Sum, Devices: []int32{-1, -1}}
}

func groups(out []wire.Response) []string {
	var g []string
	for _, r := range out {
		g = append(g, strings.Join(r.Names, "+"))
	}
	return g
}

// checkSources checks that Sources names, for every output, the inputs
// whose names it holds, in order, and every input exactly once.
func checkSources(t *testing.T, name string, p *Planner, in, out []wire.Response) {
	t.Helper()
	seen := make([]int, len(in))
	for k := range out {
		var names []string
		for _, i := range p.Sources(k) {
			names = append(names, in[i].Names...)
			seen[i]++
		}
		if !reflect.DeepEqual(names, out[k].Names) {
			t.Errorf("%s: output %d holds %v, its sources' names are %v", name, k, out[k].Names, names)
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Errorf("%s: input %d is a source of %d outputs", name, i, n)
		}
	}
}

func TestPlan(t *testing.T) {
	f32, f16 := tensor.Float32, tensor.Float16
	scaled := ar("s", 4, f32)
	scaled.Postscale = 0.5
	two := ar("g1", 4, f32)
	two.Names, two.Sizes, two.Shapes = []string{"g1", "g2"}, []int64{4, 4}, [][]int64{{4}, {4}}
	bc := ar("bc", 4, f32)
	bc.Type = wire.ResponseType(wire.Broadcast)
	tests := []struct {
		name      string
		in        []wire.Response
		threshold int64
		want      []string
	}{
		{"all fit", []wire.Response{ar("a", 4, f32), ar("b", 4, f32), ar("c", 4, f32)}, 1 << 20, []string{"a+b+c"}},
		{"threshold splits", []wire.Response{ar("a", 4, f32), ar("b", 4, f32), ar("c", 4, f32)}, 32, []string{"a+b", "c"}},
		{"disabled", []wire.Response{ar("a", 4, f32), ar("b", 4, f32)}, 0, []string{"a", "b"}},
		{"big tensor alone", []wire.Response{ar("big", 100, f32), ar("a", 4, f32)}, 64, []string{"big", "a"}},
		{"look-ahead over another dtype", []wire.Response{ar("a", 4, f32), ar("h", 4, f16), ar("b", 4, f32), ar("h2", 4, f16)}, 1 << 20,
			[]string{"a+b", "h+h2"}},
		{"look-ahead bounded by threshold", []wire.Response{ar("a", 4, f32), ar("h", 16, f16), ar("b", 4, f32)}, 40,
			[]string{"a", "h", "b"}},
		{"different scale", []wire.Response{ar("a", 4, f32), scaled, ar("b", 4, f32)}, 1 << 20, []string{"a+b", "s"}},
		{"a response of two names stays whole", []wire.Response{ar("a", 4, f32), two, ar("b", 4, f32)}, 1 << 20, []string{"a+b", "g1+g2"}},
		{"broadcast not fused", []wire.Response{ar("a", 4, f32), bc, ar("b", 4, f32)}, 1 << 20, []string{"a+b", "bc"}},
	}
	var p Planner
	for _, tt := range tests {
		out := p.Plan(tt.in, tt.threshold)
		got := groups(out)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		checkSources(t, tt.name, &p, tt.in, out)
	}
	// Tensors above MaxFused run alone and do not stop the look-ahead.
	big := []wire.Response{ar("a", 4, f32), ar("big", 64, f32), ar("b", 4, f32), ar("big2", 64, f32), ar("c", 4, f32)}
	for _, tt := range []struct {
		maxFused int64
		want     []string
	}{
		{0, []string{"a+big+b", "big2+c"}},
		{16, []string{"a+b+c", "big", "big2"}},
		{256, []string{"a+big+b", "big2+c"}},
	} {
		p.MaxFused = tt.maxFused
		out := p.Plan(big, 300)
		if got := groups(out); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("MaxFused %d: %v, want %v", tt.maxFused, got, tt.want)
		}
		checkSources(t, fmt.Sprint("MaxFused ", tt.maxFused), &p, big, out)
	}
	p.MaxFused = 0
	out := p.Plan([]wire.Response{ar("a", 4, f32), ar("b", 6, f32)}, 1<<20)
	if !reflect.DeepEqual(out[0].Sizes, []int64{4, 6}) || len(out[0].Shapes) != 2 || Bytes(&out[0]) != 40 {
		t.Fatalf("fused sizes %v shapes %v", out[0].Sizes, out[0].Shapes)
	}
}

func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{161, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			in := make([]wire.Response, n)
			for i := range in {
				in[i] = ar("t", 1000, tensor.Float32)
			}
			var p Planner
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				p.Plan(in, 4<<20)
			}
		})
	}
}
