package gomlxopt

import (
	"context"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/gohorovod/gohorovod/optim/checkpoint"
	"github.com/gohorovod/gohorovod/optim/elastic"
)

// alone is the Broadcaster of a group of one.
type alone struct{}

func (alone) BroadcastBytes(_ context.Context, b []byte, _ int) ([]byte, error) { return b, nil }

// resumable is one process of a resumable GoMLX training: the Trainer's
// variables (model, Adam's state, global step), a sampler over 32 rows and
// a step counter in one State, which a Checkpointer writes every 3 steps.
type resumable struct {
	tr      *Trainer
	sampler *elastic.Sampler
	step    int
	ckpt    *checkpoint.Checkpointer
	x       []float32
	y       []int32
}

func newResumable(t *testing.T, dir string) *resumable {
	t.Helper()
	r := &resumable{}
	r.x, r.y = batchData(32, 8)
	var err error
	if r.tr, err = NewTrainer(testBackend(), newCtx(3), mlpModel, losses.SparseCategoricalCrossEntropyLogits, adam(), newHub(1).coll(0)); err != nil {
		t.Fatal(err)
	}
	in, lab := rows(r.x, r.y, 0, 4)
	if err := r.tr.Prepare(in, lab); err != nil {
		t.Fatal(err)
	}
	h, err := r.tr.ElasticHandler()
	if err != nil {
		t.Fatal(err)
	}
	if r.sampler, err = elastic.NewSampler(32, 4, 9, 0, 1); err != nil {
		t.Fatal(err)
	}
	objs, err := elastic.NewObjects(map[string]any{"step": &r.step})
	if err != nil {
		t.Fatal(err)
	}
	state, err := elastic.NewState(alone{}, elastic.Named("model", h), elastic.Named("sampler", elastic.NewSamplerHandler(r.sampler)),
		elastic.Named("progress", objs))
	if err != nil {
		t.Fatal(err)
	}
	if r.ckpt, err = checkpoint.New(dir, state, checkpoint.Group(alone{}, func() int { return 0 })); err != nil {
		t.Fatal(err)
	}
	// The last save may still be writing in the background when the test
	// ends: wait for it before the test's directory is removed.
	t.Cleanup(func() {
		if err := r.ckpt.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return r
}

// gather returns the rows idx as a step's inputs and labels.
func (r *resumable) gather(idx []int) (inputs, labels []*tensors.Tensor) {
	x := make([]float32, 0, len(idx)*features)
	y := make([]int32, 0, len(idx))
	for _, i := range idx {
		x = append(x, r.x[i*features:(i+1)*features]...)
		y = append(y, r.y[i])
	}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(x, len(idx), features)},
		[]*tensors.Tensor{tensors.FromFlatDataAndDimensions(y, len(idx), 1)}
}

// train takes steps until the step counter reaches until, saving every 3.
func (r *resumable) train(t *testing.T, until int) {
	t.Helper()
	for r.step < until {
		bs := r.sampler.Batches()
		if len(bs) == 0 {
			r.sampler.SetEpoch(r.sampler.Epoch() + 1)
			continue
		}
		in, lab := r.gather(bs[0])
		if _, err := r.tr.TrainStep(context.Background(), in, lab); err != nil {
			t.Fatal(err)
		}
		r.sampler.Record()
		r.step++
		if r.step%3 == 0 {
			if err := r.ckpt.Save(context.Background(), int64(r.step)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCheckpointResume trains 14 steps (two epochs of 8 steps, less two)
// in one go; then 7 steps, "dies" (the last checkpoint is of step 6), and
// a new trainer over a fresh Context loads the checkpoint and trains to
// step 14: its variables, Adam's state and global step included, equal the
// uninterrupted run's bit for bit.
func TestCheckpointResume(t *testing.T) {
	whole := newResumable(t, t.TempDir())
	whole.train(t, 14)
	want := flatVars(t, whole.tr.Context())
	wantStep := optimizers.GetGlobalStep(whole.tr.Context())

	dir := t.TempDir()
	first := newResumable(t, dir)
	first.train(t, 7)
	if err := first.ckpt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := newResumable(t, dir)
	info, err := again.ckpt.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Step != 6 || again.step != 6 || again.sampler.Processed() != 24 || optimizers.GetGlobalStep(again.tr.Context()) != 6 {
		t.Fatalf("resumed at step %d (counter %d, sampler at %d, global step %d), want 6, 6, 24, 6",
			info.Step, again.step, again.sampler.Processed(), optimizers.GetGlobalStep(again.tr.Context()))
	}
	again.train(t, 14)
	if d := maxRelDiff(t, flatVars(t, again.tr.Context()), want); d != 0 {
		t.Errorf("the resumed run's variables differ from the uninterrupted run's by %g", d)
	}
	if s := optimizers.GetGlobalStep(again.tr.Context()); s != wantStep {
		t.Errorf("global step %d, the uninterrupted run's %d", s, wantStep)
	}
}

// TestCheckpointOtherModel: a checkpoint of this model loaded into a
// trainer whose hidden layer is wider names the variable, and changes
// nothing.
func TestCheckpointOtherModel(t *testing.T) {
	dir := t.TempDir()
	r := newResumable(t, dir)
	r.train(t, 3)
	if err := r.ckpt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := r.tr.ElasticHandler()
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.(elastic.Codec).Encode()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewTrainer(testBackend(), newCtx(3), wideModel, losses.SparseCategoricalCrossEntropyLogits, adam(), newHub(1).coll(0))
	if err != nil {
		t.Fatal(err)
	}
	in, lab := rows(r.x, r.y, 0, 4)
	if err := other.Prepare(in, lab); err != nil {
		t.Fatal(err)
	}
	oh, err := other.ElasticHandler()
	if err != nil {
		t.Fatal(err)
	}
	before := flatVars(t, other.Context())
	err = oh.(elastic.Codec).Decode(b)
	if err == nil || !strings.Contains(err.Error(), "in the state") || !strings.Contains(err.Error(), "hidden") {
		t.Fatalf("decoding another model's variables: %v", err)
	}
	if d := maxRelDiff(t, flatVars(t, other.Context()), before); d != 0 {
		t.Errorf("a refused decode changed the variables by %g", d)
	}
	if err := oh.(elastic.Codec).Decode(b[:10]); err == nil {
		t.Fatalf("decoding 10 bytes: %v", err)
	}
}

// wideModel is mlpModel with a hidden layer of 24.
func wideModel(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := layers.DenseWithBias(ctx.In("hidden"), inputs[0], 24)
	x = activations.Relu(x)
	return []*graph.Node{layers.DenseWithBias(ctx.In("out"), x, classes)}
}
