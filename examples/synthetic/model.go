package main

import (
	"bufio"
	"embed"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// The parameter shapes of the models that come with the benchmark
// (torchvision's layouts, one "name<TAB>AxBxC" line per tensor).
//
//go:embed shapes/*_shapes.txt
var shapeFiles embed.FS

// Models lists the names that -model accepts.
var models = []string{"resnet50", "vgg16", "tiny40"}

// layer is one parameter tensor of the synthetic model.
type layer struct {
	name  string
	shape []int
}

// elements returns the number of elements of the layer.
func (l layer) elements() int {
	n := 1
	for _, d := range l.shape {
		n *= d
	}
	return n
}

// parseShapes reads a shapes file: one tensor a line, "name<TAB>shape" with
// the shape written as dimensions joined by 'x' ("64x3x7x7"); blank lines
// and lines starting with '#' are skipped. A line without a tab is a shape
// alone, named after its line.
func parseShapes(r io.Reader, src string) ([]layer, error) {
	var layers []layer
	sc := bufio.NewScanner(r)
	seen := make(map[string]bool)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, dims := fmt.Sprintf("tensor.%d", lineNo), line
		if i := strings.IndexByte(line, '\t'); i >= 0 {
			name, dims = strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
		if name == "" || seen[name] {
			return nil, fmt.Errorf("synthetic: %s:%d: empty or duplicate tensor name %q", src, lineNo, name)
		}
		seen[name] = true
		var shape []int
		for _, f := range strings.Split(dims, "x") {
			d, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || d < 1 {
				return nil, fmt.Errorf("synthetic: %s:%d: bad shape %q", src, lineNo, dims)
			}
			shape = append(shape, d)
		}
		layers = append(layers, layer{name: name, shape: shape})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("synthetic: %s: %w", src, err)
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("synthetic: %s: no tensors", src)
	}
	return layers, nil
}

// loadShapes returns the layers of a shapes file given by path, or, with
// path empty, of the named built-in model.
func loadShapes(model, path string) ([]layer, error) {
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("synthetic: %w", err)
		}
		defer f.Close()
		return parseShapes(f, path)
	}
	f, err := shapeFiles.Open("shapes/" + model + "_shapes.txt")
	if err != nil {
		return nil, fmt.Errorf("synthetic: unknown model %q (built in: %s; or give -shapes FILE)", model, strings.Join(models, ", "))
	}
	defer f.Close()
	return parseShapes(f, model)
}

// model is the synthetic model: one float32 parameter per layer, in file
// order (the order of the forward pass); backward visits them in reverse.
// It reaches the gradients through the parameters' Grad tensors, whose
// storage the DistributedOptimizer moves into its flat buffer when asked
// (-flat-gradients, on by default here: optim.FlatGradients(true)).
type model struct {
	layers []layer
	params []optim.Param
	total  int // elements over all layers
}

// newModel allocates the parameters (values 0.01, gradients 0), touching
// every page so that the first step does not pay for faulting them in.
func newModel(layers []layer) *model {
	m := &model{layers: layers}
	for _, l := range layers {
		v := tensor.New(tensor.Float32, l.shape...)
		g := tensor.New(tensor.Float32, l.shape...)
		for i := range v.Float32s() {
			v.Float32s()[i] = 0.01
		}
		clear(g.Bytes())
		m.params = append(m.params, optim.Param{Name: l.name, Value: v, Grad: g})
		m.total += l.elements()
	}
	return m
}

// compute does the work of layer i's backward: passes sweeps of real
// arithmetic over its gradient (the integer part whole sweeps, the
// fraction over a prefix), so that the cost is proportional to the layer's
// size. The values stay bounded (they tend to 1).
func (m *model) compute(i int, passes float64) {
	g := m.params[i].Grad.Float32s()
	whole := int(passes)
	for range whole {
		sweep(g)
	}
	if part := int((passes - float64(whole)) * float64(len(g))); part > 0 {
		sweep(g[:part])
	}
}

func sweep(g []float32) {
	for j := range g {
		g[j] = g[j]*0.5 + 0.5
	}
}
