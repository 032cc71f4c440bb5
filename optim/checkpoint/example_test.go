package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gohorovod/gohorovod/optim/checkpoint"
	"github.com/gohorovod/gohorovod/optim/elastic"
)

// solo is the Broadcaster of a group of one; a real job passes
// checkpoint.Runtime(hvd.Default()) instead of Group.
type solo struct{}

func (solo) BroadcastBytes(_ context.Context, b []byte, _ int) ([]byte, error) { return b, nil }

// train is a resumable training loop: everything it changes is in the
// state, it loads the newest checkpoint on start, and it saves one every
// 4 steps. stopAt plays the job being killed there (-1: never).
func train(dir string, stopAt int) error {
	ctx := context.Background()
	var step, epoch int
	loss := 0.0
	sampler, _ := elastic.NewSampler(10, 2, 42, 0, 1) // 10 samples, 2 per step
	objs, _ := elastic.NewObjects(map[string]any{"step": &step, "epoch": &epoch, "loss": &loss})
	state, _ := elastic.NewState(nil, elastic.Named("progress", objs), elastic.Named("sampler", elastic.NewSamplerHandler(sampler)))
	ckpt, err := checkpoint.New(dir, state, checkpoint.Group(solo{}, func() int { return 0 }))
	if err != nil {
		return err
	}
	switch info, err := ckpt.Load(ctx); {
	case err == nil:
		fmt.Printf("resumed from step %d (epoch %d)\n", info.Step, epoch+1)
	case !errors.Is(err, checkpoint.ErrNoCheckpoint):
		return err
	}
	for ; epoch < 2; epoch++ {
		for _, batch := range sampler.Batches() {
			if step == stopAt {
				fmt.Println("killed at step", step)
				return ckpt.Close(ctx)
			}
			loss += float64(batch[0]) // the "training"
			sampler.Record()
			step++
			if step%4 == 0 {
				if err := ckpt.Save(ctx, int64(step)); err != nil {
					return err
				}
			}
		}
		sampler.SetEpoch(epoch + 1)
	}
	fmt.Println("done: step", step, "loss", loss)
	return ckpt.Close(ctx)
}

// A loop killed at step 7 resumes from the checkpoint of step 4 and ends
// as the uninterrupted loop does.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	whole, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(whole)

	_ = train(whole, -1)
	_ = train(dir, 7)
	_ = train(dir, -1)
	// Output:
	// done: step 10 loss 49
	// killed at step 7
	// resumed from step 4 (epoch 1)
	// done: step 10 loss 49
}
