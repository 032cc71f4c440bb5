package elastic_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gohorovod/gohorovod/optim/elastic"
)

// solo is the Broadcaster of a group of one.
type solo struct{}

func (solo) BroadcastBytes(_ context.Context, b []byte, _ int) ([]byte, error) { return b, nil }

// A training loop commits its epoch, its loss and its sampler; a failure
// goes back to the last commit, and the group (here re-formed at size 2,
// of which this is rank 0) carries on from there.
func ExampleState() {
	epoch, loss := 0, 0.0
	sampler, _ := elastic.NewSampler(10, 2, 42, 0, 1)
	objs, _ := elastic.NewObjects(map[string]any{"epoch": &epoch, "loss": &loss})
	state, _ := elastic.NewState(solo{},
		elastic.Named("objects", objs),
		elastic.Named("sampler", elastic.NewSamplerHandler(sampler)))
	state.RegisterResetCallback(func() error { return sampler.SetPlacement(0, 2) })

	errLost := errors.New("a worker was lost")
	train := func(failAfter int) error {
		for step, batch := range sampler.Batches() {
			if step == failAfter {
				return errLost
			}
			loss += float64(len(batch))
			sampler.Record()
			if err := state.Commit(); err != nil {
				return err
			}
		}
		return nil
	}

	err := train(3)
	fmt.Println(err, "at position", sampler.Processed())
	// What elastic.Run will do: restore, re-form the group, reset, sync.
	_ = state.Restore()
	_ = state.Reset()
	_ = state.Sync(context.Background())
	fmt.Println("rank", sampler.Rank(), "of", sampler.Size(), "resumes at", sampler.Processed(), "with", sampler.Batches())
	// Output:
	// a worker was lost at position 6
	// rank 0 of 2 resumes at 6 with [[0 9]]
}
