package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/elastic"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// trainee is one rank's training state in these tests: a model of two
// parameters under SGD with momentum, a sampler, a step, an epoch and a
// random generator, all in one elastic.State.
type trainee struct {
	w, b    []float64
	opt     optim.Optimizer
	sampler *elastic.Sampler
	step    int64
	rng     *rand.PCG
	state   *elastic.State
}

// newTrainee returns rank's trainee among size over a dataset of n
// samples, batches of 3 per rank, its model of wn weights.
func newTrainee(t testing.TB, rank, size, n, wn int) *trainee {
	t.Helper()
	tr := &trainee{w: make([]float64, wn), b: []float64{0.5}, rng: rand.NewPCG(7, 11)}
	for i := range tr.w {
		tr.w[i] = float64(i) / 10
	}
	params := []optim.Param{
		{Name: "fc.w", Value: tensor.FromFloat64(tr.w), Grad: tensor.FromFloat64(make([]float64, wn))},
		{Name: "fc.b", Value: tensor.FromFloat64(tr.b), Grad: tensor.FromFloat64(make([]float64, 1))},
	}
	var err error
	if tr.opt, err = optim.NewSGD(params, optim.SGDConfig{LR: 0.1, Momentum: 0.9}); err != nil {
		t.Fatal(err)
	}
	if tr.sampler, err = elastic.NewSampler(n, 3, 5, rank, size); err != nil {
		t.Fatal(err)
	}
	objs, err := elastic.NewObjects(map[string]any{"step": &tr.step, "rng": tr.rng})
	if err != nil {
		t.Fatal(err)
	}
	model, err := elastic.NewOptimizer(tr.opt)
	if err != nil {
		t.Fatal(err)
	}
	if tr.state, err = elastic.NewState(nil, elastic.Named("progress", objs), elastic.Named("model", model),
		elastic.Named("sampler", elastic.NewSamplerHandler(tr.sampler))); err != nil {
		t.Fatal(err)
	}
	return tr
}

// train takes one step: a gradient from the batch and the generator, the
// update, the sampler's record. It returns the batch.
func (tr *trainee) train() ([]int, error) {
	bs := tr.sampler.Batches()
	if len(bs) == 0 {
		return nil, fmt.Errorf("no batch left in epoch %d", tr.sampler.Epoch())
	}
	for _, p := range tr.opt.Params() {
		g := p.Grad.Float64s()
		for i := range g {
			g[i] = float64(tr.rng.Uint64()%100)/100 - 0.5
		}
	}
	if err := tr.opt.Step(); err != nil {
		return nil, err
	}
	tr.sampler.Record()
	tr.step++
	return bs[0], nil
}

// image is everything a trainee's state holds, comparable bit for bit.
type image struct {
	W, B             []float64
	Opt              string
	Step             int64
	RNG              uint64 // the generator's next output
	Epoch, Processed int
}

func (tr *trainee) image(t testing.TB) image {
	t.Helper()
	st := tr.opt.State()
	// fmt prints maps sorted, and float64s exactly (the shortest text
	// that reads back as the same bits).
	peek := *tr.rng
	return image{W: append([]float64(nil), tr.w...), B: append([]float64(nil), tr.b...),
		Opt:  fmt.Sprint(st.Scalars, st.Tensors["fc.w/momentum"].Float64s(), st.Tensors["fc.b/momentum"].Float64s()),
		Step: tr.step, RNG: peek.Uint64(), Epoch: tr.sampler.Epoch(), Processed: tr.sampler.Processed()}
}

func (a image) String() string {
	return fmt.Sprintf("w %v b %v step %d rng %d epoch %d at %d opt %s", a.W, a.B, a.Step, a.RNG, a.Epoch, a.Processed, a.Opt)
}

// onRanks runs fn on n local ranks, each with its Runtime.
func onRanks(t testing.TB, n int, fn func(r *hvd.Runtime, rank int) error) {
	t.Helper()
	if err := hvd.RunLocal(n, fn); err != nil {
		t.Fatal(err)
	}
}

var bg = context.Background()

// solo is the Broadcaster of a group of one.
type solo struct{}

func (solo) BroadcastBytes(_ context.Context, b []byte, _ int) ([]byte, error) { return b, nil }
