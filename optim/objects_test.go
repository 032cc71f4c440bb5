package optim

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
)

// settings is a value of the kind programs broadcast: nested, with a map.
type settings struct {
	Name   string
	Layers []int
	Extra  map[string]float64
}

// objectChecks runs BroadcastObject, AllgatherObject and AverageMetrics on
// one rank of size and checks the results.
func objectChecks(ctx context.Context, c GatherCollectives, rank, size int) error {
	// Broadcast: rank 1's value (or rank 0's at size 1) reaches everyone,
	// whatever the others held, and twice in a row under one name.
	root := min(1, size-1)
	for round := range 2 {
		v := settings{Name: fmt.Sprint("rank", rank), Layers: []int{rank}}
		if rank == root {
			v = settings{Name: fmt.Sprint("root", round), Layers: []int{784, 256, 10}, Extra: map[string]float64{"lr": 0.1 * float64(round+1)}}
		}
		if err := BroadcastObject(ctx, c, &v, root, "cfg"); err != nil {
			return err
		}
		want := settings{Name: fmt.Sprint("root", round), Layers: []int{784, 256, 10}, Extra: map[string]float64{"lr": 0.1 * float64(round+1)}}
		if !reflect.DeepEqual(v, want) {
			return fmt.Errorf("broadcast round %d: got %+v, want %+v", round, v, want)
		}
	}
	// Allgather: values of different encoded lengths, in rank order.
	mine := make([]string, rank+1)
	for i := range mine {
		mine[i] = fmt.Sprint("r", rank)
	}
	all, err := AllgatherObject(ctx, c, mine, "names")
	if err != nil {
		return err
	}
	if len(all) != size {
		return fmt.Errorf("allgather: %d values for %d ranks", len(all), size)
	}
	for r, v := range all {
		if len(v) != r+1 || v[0] != fmt.Sprint("r", r) {
			return fmt.Errorf("allgather: rank %d's value %q", r, v)
		}
	}
	// Metrics: rank r saw r+1 samples of loss r and r correct; the means
	// are over all samples, not over ranks.
	loss, acc := &Metric{Name: "loss"}, &Metric{Name: "accuracy"}
	for range rank + 1 {
		loss.Add(float64(rank), 1)
	}
	acc.Add(float64(rank)/float64(rank+1), float64(rank+1))
	got, err := AverageMetrics(ctx, c, loss, acc)
	if err != nil {
		return err
	}
	var sumLoss, samples float64
	for r := range size {
		sumLoss += float64(r * (r + 1))
		samples += float64(r + 1)
	}
	wantLoss := sumLoss / samples
	wantAcc := float64(size*(size-1)/2) / samples
	if math.Abs(got[0]-wantLoss) > 1e-12 || math.Abs(got[1]-wantAcc) > 1e-12 {
		return fmt.Errorf("metrics %v, want [%v %v]", got, wantLoss, wantAcc)
	}
	if loss.Local() != float64(rank) {
		return fmt.Errorf("local loss %v", loss.Local())
	}
	return nil
}

// TestObjects: object broadcast and allgather and metric averaging on the
// in-memory group, at np 1, 2 and 3.
func TestObjects(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			g := newGroup(n)
			onRanks(t, n, func(rank int) error {
				return objectChecks(context.Background(), member{g, rank}, rank, n)
			})
		})
	}
}

// TestRuntimeObjects: the same over the real runtime on the in-memory
// communicator.
func TestRuntimeObjects(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts := startRuntimes(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			onRanks(t, n, func(rank int) error {
				c, err := FromRuntime(rts[rank])
				if err != nil {
					return err
				}
				return objectChecks(ctx, c.(GatherCollectives), rank, n)
			})
		})
	}
}

// TestBroadcastObjectErrors: a value gob cannot encode is an error, not a
// hang, when rank is known (size 1).
func TestBroadcastObjectErrors(t *testing.T) {
	g := newGroup(1)
	f := func() {}
	if err := BroadcastObject(context.Background(), member{g, 0}, &f, 0, "func"); err == nil {
		t.Fatal("broadcast of a func succeeded")
	}
	m := &Metric{Name: "empty"}
	got, err := AverageMetrics(context.Background(), member{g, 0}, m)
	if err != nil || !math.IsNaN(got[0]) {
		t.Fatalf("empty metric: %v, %v", got, err)
	}
}
