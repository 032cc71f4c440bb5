package mlp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/tensor"
)

// MLP is a stack of fully connected layers, ReLU after every layer but the
// last, whose outputs are the logits of a softmax classifier; optionally a
// normalisation layer (WithNorms) between each hidden layer and its ReLU.
// It keeps the activations of the last Forward for Backward; it is not
// safe for concurrent use.
type MLP struct {
	sizes    []int         // layer widths, input first
	w, b     [][]float32   // layer l: w[l] is sizes[l]×sizes[l+1] row-major, b[l] sizes[l+1]
	fc       []optim.Param // layer l: fc[2l] its weight, fc[2l+1] its bias
	norms    []Norm        // hidden layer l: norms[l] (nil: none)
	params   []optim.Param // every parameter in forward order; the gradients are reached through these (see Backward)
	training bool

	n     int         // rows of the last Forward
	cap   int         // rows the buffers hold
	x     []float32   // input of the last Forward (the caller's slice)
	act   [][]float32 // act[l]: output of layer l, n×sizes[l+1]
	delta [][]float32 // delta[l]: dLoss/d(pre-activation of layer l)
}

// Norm is a normalisation layer over the features of n×width inputs, such
// as *nn.BatchNorm[float32] (package optim/nn), local or synchronised
// across ranks. Forward and Backward return slices of the layer's own that
// the next call overwrites (see nn.BatchNorm).
type Norm interface {
	// Features returns the width it normalises.
	Features() int
	// Forward normalises the n rows of x.
	Forward(x []float32, n int) ([]float32, error)
	// Backward returns dLoss/dx of the last Forward from dLoss/dy and
	// adds its parameters' gradients through their Param.Grad.
	Backward(dy []float32) ([]float32, error)
	// Params returns its learnable parameters.
	Params() []optim.Param
	// SetTraining switches between training (batch statistics) and
	// evaluation (running statistics).
	SetTraining(on bool)
}

// Option configures an MLP.
type Option func(*MLP)

// WithNorms puts norms[l] between hidden layer l+1's linear map and its
// ReLU (PyTorch's Linear → BatchNorm1d → ReLU), one per hidden layer, of
// that layer's width; a nil entry leaves its layer without one. Their
// parameters join the model's after their layer's (fc1.weight, fc1.bias,
// then norms[0]'s, fc2.weight, ...), so they need names of their own. The
// caller builds them, so that this package does not depend on the
// runtime: nn.NewBatchNorm[float32]("bn1", width, nn.Sync(coll)), ...
// New panics if the count or a width does not fit.
func WithNorms(norms ...Norm) Option {
	return func(m *MLP) { m.norms = append([]Norm(nil), norms...) }
}

// New returns an MLP with the given layer widths (input first, classes
// last), weights drawn from He et al.'s normal initialisation with the given
// seed, and biases zero, in training mode. It panics on fewer than two
// widths, a width < 1, or norms that do not fit the hidden layers.
func New(sizes []int, seed uint64, opts ...Option) *MLP {
	if len(sizes) < 2 {
		panic("mlp: need at least an input and an output width")
	}
	m := &MLP{sizes: append([]int(nil), sizes...), training: true}
	for _, o := range opts {
		o(m)
	}
	if m.norms == nil {
		m.norms = make([]Norm, len(sizes)-2)
	}
	if len(m.norms) != len(sizes)-2 {
		panic(fmt.Sprintf("mlp: %d norms for %d hidden layers", len(m.norms), len(sizes)-2))
	}
	for l, nm := range m.norms {
		if nm != nil && nm.Features() != sizes[l+1] {
			panic(fmt.Sprintf("mlp: norm %d has %d features, hidden layer %d is %d wide", l, nm.Features(), l+1, sizes[l+1]))
		}
	}
	r := rand.New(rand.NewPCG(seed, 0x6d6c70))
	for l := 0; l+1 < len(sizes); l++ {
		in, out := sizes[l], sizes[l+1]
		if in < 1 || out < 1 {
			panic(fmt.Sprintf("mlp: layer widths %v", sizes))
		}
		w, b := make([]float32, in*out), make([]float32, out)
		std := math.Sqrt(2 / float64(in))
		for i := range w {
			w[i] = float32(r.NormFloat64() * std)
		}
		m.w, m.b = append(m.w, w), append(m.b, b)
		name := fmt.Sprintf("fc%d", l+1)
		fc := []optim.Param{
			{Name: name + ".weight", Value: tensor.FromFloat32(w, in, out), Grad: tensor.New(tensor.Float32, in, out)},
			{Name: name + ".bias", Value: tensor.FromFloat32(b, out), Grad: tensor.New(tensor.Float32, out)},
		}
		m.fc = append(m.fc, fc...)
		m.params = append(m.params, fc...)
		if l < len(m.norms) && m.norms[l] != nil {
			m.params = append(m.params, m.norms[l].Params()...)
		}
	}
	return m
}

// SetTraining switches the normalisation layers between training mode
// (the default: batch statistics, running statistics updated) and
// evaluation mode (running statistics). Without norms it changes nothing.
func (m *MLP) SetTraining(on bool) {
	m.training = on
	for _, nm := range m.norms {
		if nm != nil {
			nm.SetTraining(on)
		}
	}
}

// Layers returns the number of layers.
func (m *MLP) Layers() int { return len(m.w) }

// Params returns the parameters in forward order: fc1.weight, fc1.bias,
// (the first norm's,) fc2.weight, ... Their values wrap the model's weights: an optimizer step
// updates the model. Backward writes the gradients through Param.Grad, so
// an optimizer may move their storage (optim.FlatGradients).
func (m *MLP) Params() []optim.Param { return m.params }

func (m *MLP) grow(n int) {
	if n <= m.cap {
		return
	}
	m.cap = n
	m.act = make([][]float32, len(m.w))
	m.delta = make([][]float32, len(m.w))
	for l := range m.w {
		m.act[l] = make([]float32, n*m.sizes[l+1])
		m.delta[l] = make([]float32, n*m.sizes[l+1])
	}
}

func general(rows, cols int, data []float32) blas32.General {
	return blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: data[:rows*cols]}
}

// Forward computes the logits of n inputs (x holds n rows of the input
// width) and returns them as n rows of the output width. The returned slice
// is the model's and is overwritten by the next Forward. Only a norm fails
// (a sync one's collective, or a training batch of one row).
func (m *MLP) Forward(x []float32, n int) ([]float32, error) {
	if len(x) < n*m.sizes[0] {
		panic(fmt.Sprintf("mlp: Forward of %d rows with %d values", n, len(x)))
	}
	m.grow(n)
	m.n, m.x = n, x
	in := x
	for l := range m.w {
		wi, wo := m.sizes[l], m.sizes[l+1]
		y := m.act[l][:n*wo]
		for i := 0; i < n; i++ {
			copy(y[i*wo:(i+1)*wo], m.b[l])
		}
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, general(n, wi, in), general(wi, wo, m.w[l]), 1, general(n, wo, y))
		if l+1 < len(m.w) {
			if nm := m.norms[l]; nm != nil {
				h, err := nm.Forward(y, n)
				if err != nil {
					return nil, fmt.Errorf("mlp: layer %d: %w", l+1, err)
				}
				copy(y, h)
			}
			for i, v := range y {
				if v < 0 {
					y[i] = 0
				}
			}
		}
		in = y
	}
	return m.act[len(m.w)-1][:n*m.sizes[len(m.sizes)-1]], nil
}

// Loss returns the mean softmax cross-entropy of the last Forward's logits
// against labels (one per row) and the number of rows whose largest logit
// is the label's, and keeps the gradient of the loss for Backward.
func (m *MLP) Loss(labels []uint8) (loss float64, correct int) {
	k := m.sizes[len(m.sizes)-1]
	if len(labels) != m.n {
		panic(fmt.Sprintf("mlp: %d labels for %d rows", len(labels), m.n))
	}
	logits := m.act[len(m.w)-1]
	d := m.delta[len(m.w)-1]
	inv := 1 / float32(m.n)
	for i := 0; i < m.n; i++ {
		z, g := logits[i*k:(i+1)*k], d[i*k:(i+1)*k]
		y := int(labels[i])
		best := 0
		for j := range z {
			if z[j] > z[best] {
				best = j
			}
		}
		if best == y {
			correct++
		}
		mx := z[best]
		var sum float64
		for j := range z {
			e := math.Exp(float64(z[j] - mx))
			g[j] = float32(e)
			sum += e
		}
		loss += math.Log(sum) - float64(z[y]-mx)
		s := float32(1 / sum)
		for j := range g {
			g[j] *= s * inv
		}
		g[y] -= inv
	}
	return loss / float64(m.n), correct
}

// Backward adds the gradient of the last Loss to every parameter's gradient
// (gradients accumulate until zeroed, so several backward passes may add up
// before a step), last layer first. As soon as a parameter's gradient is
// final it calls ready with it (bias, then weight, of each layer, and of
// each norm after the layer above it), unless ready is nil; an error from
// ready or from a norm stops Backward and is returned.
func (m *MLP) Backward(ready func(optim.Param) error) error {
	n := m.n
	for l := len(m.w) - 1; l >= 0; l-- {
		wi, wo := m.sizes[l], m.sizes[l+1]
		d := m.delta[l][:n*wo]
		// Bias: column sums of delta.
		db := m.fc[2*l+1].Grad.Float32s()
		for i := 0; i < n; i++ {
			row := d[i*wo : (i+1)*wo]
			for j, v := range row {
				db[j] += v
			}
		}
		if err := call(ready, m.fc[2*l+1]); err != nil {
			return err
		}
		in := m.x
		if l > 0 {
			in = m.act[l-1]
		}
		// Weight: in^T · delta.
		blas32.Gemm(blas.Trans, blas.NoTrans, 1, general(n, wi, in), general(n, wo, d), 1, general(wi, wo, m.fc[2*l].Grad.Float32s()))
		if err := call(ready, m.fc[2*l]); err != nil {
			return err
		}
		if l == 0 {
			break
		}
		// Input gradient, through the previous layer's ReLU and norm.
		dx := m.delta[l-1][:n*wi]
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, general(n, wo, d), general(wi, wo, m.w[l]), 0, general(n, wi, dx))
		a := m.act[l-1]
		for i := range dx {
			if a[i] <= 0 {
				dx[i] = 0
			}
		}
		if nm := m.norms[l-1]; nm != nil {
			g, err := nm.Backward(dx)
			if err != nil {
				return fmt.Errorf("mlp: layer %d: %w", l, err)
			}
			copy(dx, g)
			ps := nm.Params()
			for i := len(ps) - 1; i >= 0; i-- {
				if err := call(ready, ps[i]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func call(ready func(optim.Param) error, p optim.Param) error {
	if ready == nil {
		return nil
	}
	return ready(p)
}

// Predict returns, for each of the n rows of x, the index of the largest
// logit. It runs the norms in evaluation mode (where a sync one does not
// communicate, so ranks may predict different numbers of rows), then
// restores the mode.
func (m *MLP) Predict(x []float32, n int) ([]int, error) {
	if m.training {
		m.SetTraining(false)
		defer m.SetTraining(true)
	}
	z, err := m.Forward(x, n)
	if err != nil {
		return nil, err
	}
	k := m.sizes[len(m.sizes)-1]
	out := make([]int, n)
	for i := range out {
		row := z[i*k : (i+1)*k]
		for j := range row {
			if row[j] > row[out[i]] {
				out[i] = j
			}
		}
	}
	return out, nil
}

// ParseWidths reads a comma-separated list of layer widths, such as a
// --hidden flag's "256,128": each a positive integer.
func ParseWidths(list string) ([]int, error) {
	var ws []int
	for _, f := range strings.Split(list, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return nil, fmt.Errorf("bad hidden width %q", f)
		}
		ws = append(ws, w)
	}
	return ws, nil
}
