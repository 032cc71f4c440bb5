package elasticbench

import (
	"fmt"
	"math/rand/v2"

	"github.com/gohorovod/gohorovod/internal/mlp"
	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/elastic"
	"github.com/gohorovod/gohorovod/tensor"
)

// MNIST's image and label sizes, as examples/internal/mnist has them.
const (
	Pixels  = 28 * 28
	Classes = 10
	// TrainLen is the number of MNIST training images the sampler deals.
	TrainLen = 60000
)

// MNIST is the training state of examples/mnist on one rank, over random
// data: the MLP, its SGD optimizer (momentum 0.9, weight decay 1e-4, lr
// 0.05, as the example's defaults), a sampler over the 60,000 training
// images and the epoch and batch counters, committed together by State.
type MNIST struct {
	Model   *mlp.MLP
	Opt     *optim.SGD
	Sampler *elastic.Sampler
	State   *elastic.State
	// Epoch and Batch are the values of the Objects handler.
	Epoch, Batch int

	batch int
	x     []float32
	y     []uint8
}

// NewMNIST returns the state of an MLP with the given hidden widths (784
// inputs and 10 classes around them) trained batch images at a time, with
// weights and data drawn from seed.
func NewMNIST(hidden []int, batch int, seed uint64) (*MNIST, error) {
	if batch < 1 {
		return nil, fmt.Errorf("elasticbench: batch %d must be at least 1", batch)
	}
	widths := append(append([]int{Pixels}, hidden...), Classes)
	for _, w := range widths {
		if w < 1 {
			return nil, fmt.Errorf("elasticbench: layer widths %v must be at least 1", widths)
		}
	}
	m := &MNIST{Model: mlp.New(widths, seed), batch: batch}
	var err error
	if m.Opt, err = optim.NewSGD(m.Model.Params(), optim.SGDConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 1e-4}); err != nil {
		return nil, err
	}
	if m.Sampler, err = elastic.NewSampler(TrainLen, batch, seed, 0, 1); err != nil {
		return nil, err
	}
	objs, err := elastic.NewObjects(map[string]any{"epoch": &m.Epoch, "batch": &m.Batch})
	if err != nil {
		return nil, err
	}
	oh, err := elastic.NewOptimizer(m.Opt)
	if err != nil {
		return nil, err
	}
	if m.State, err = elastic.NewState(nil, elastic.Named("objects", objs), elastic.Named("optimizer", oh),
		elastic.Named("sampler", elastic.NewSamplerHandler(m.Sampler))); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, 0x696d67))
	m.x = make([]float32, batch*Pixels)
	for i := range m.x {
		m.x[i] = r.Float32()
	}
	m.y = make([]uint8, batch)
	for i := range m.y {
		m.y[i] = uint8(r.IntN(Classes))
	}
	return m, nil
}

// Step is one training step on the batch: zero the gradients, forward,
// loss, backward, optimizer step, then record the batch in the sampler and
// the counter, as the training loop does before a commit.
func (m *MNIST) Step() error {
	if err := m.Opt.ZeroGrad(); err != nil {
		return err
	}
	if _, err := m.Model.Forward(m.x, m.batch); err != nil {
		return err
	}
	m.Model.Loss(m.y)
	if err := m.Model.Backward(nil); err != nil {
		return err
	}
	if err := m.Opt.Step(); err != nil {
		return err
	}
	m.Sampler.Record()
	m.Batch++
	return nil
}

// BatchSize returns the images per step.
func (m *MNIST) BatchSize() int { return m.batch }

// NumParams returns the number of float32 parameters of the MLP.
func (m *MNIST) NumParams() int { return numElems(m.Opt.Params()) }

// SnapshotBytes returns the bytes of tensors a commit copies: every
// parameter and every optimizer buffer (the sampler's position and the two
// ints are a few dozen bytes more, not counted).
func (m *MNIST) SnapshotBytes() int { return snapshotBytes(m.Opt) }

// Big is a state of float32 parameters in tensors of equal size with an
// SGD optimizer with momentum, behind one elastic.Optimizer handler: a
// commit copies the parameters and the momentum buffers, which hold as
// many bytes as the parameters.
type Big struct {
	Opt   *optim.SGD
	State *elastic.State
}

// NewBig returns a state whose snapshot is total bytes: total/2 of float32
// parameters in the given number of tensors and total/2 of their momentum.
// total must be a multiple of 8·tensors. Every byte of it has been written
// (a step has run), so that a commit reads memory, not the zero page.
func NewBig(total, tensors int) (*Big, error) {
	if tensors < 1 || total < 8*tensors || total%(8*tensors) != 0 {
		return nil, fmt.Errorf("elasticbench: %d bytes do not split into %d float32 tensors and their momentum", total, tensors)
	}
	n := total / 2 / tensors / 4
	ps := make([]optim.Param, tensors)
	for i := range ps {
		v, g := make([]float32, n), make([]float32, n)
		for j := range v {
			v[j], g[j] = float32(j%1000)/1000, 1e-3
		}
		ps[i] = optim.Param{Name: fmt.Sprintf("t%d", i), Value: tensor.FromFloat32(v, n), Grad: tensor.FromFloat32(g, n)}
	}
	opt, err := optim.NewSGD(ps, optim.SGDConfig{LR: 0.01, Momentum: 0.9})
	if err != nil {
		return nil, err
	}
	if err := opt.Step(); err != nil { // writes the momentum buffers
		return nil, err
	}
	oh, err := elastic.NewOptimizer(opt)
	if err != nil {
		return nil, err
	}
	s, err := elastic.NewState(nil, elastic.Named("optimizer", oh))
	if err != nil {
		return nil, err
	}
	return &Big{Opt: opt, State: s}, nil
}

// SnapshotBytes returns the bytes a commit copies: the parameters and their
// momentum.
func (b *Big) SnapshotBytes() int { return snapshotBytes(b.Opt) }

// NewCopy returns a source of n written bytes and a destination for it:
// copy(dst, src) is the yardstick of a commit of n bytes.
func NewCopy(n int) (dst, src []byte) {
	dst, src = make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // the first write to dst faults its pages in
	return dst, src
}

func numElems(ps []optim.Param) int {
	n := 0
	for _, p := range ps {
		n += p.Value.Len()
	}
	return n
}

func snapshotBytes(opt optim.Optimizer) int {
	n := 0
	for _, p := range opt.Params() {
		n += p.Value.NumBytes()
	}
	for _, t := range opt.State().Tensors {
		n += t.NumBytes()
	}
	return n
}
