package optim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// asyncPlan is what one rank does in an asynchronous averaging scenario:
// its number of steps, and the steps before which it aborts and resumes
// (0: never).
type asyncPlan struct{ steps, abortAt, resumeAt int }

// asyncResult is one rank's outcome: its final weights, and the rounds it
// completed in all and while paused.
type asyncResult struct {
	x                    []float64
	rounds, pausedRounds int
}

// asyncRun trains rank's replica of the linear model with
// AsyncModelAverage over coll, following plan; each step sleeps a little
// longer on higher ranks, so that the ranks run at different paces.
func asyncRun(ctx context.Context, coll Collectives, rank, n int, plan asyncPlan) (asyncResult, error) {
	var res asyncResult
	m := newLinear(decD, uint64(rank)+1)
	inner, err := NewSGD(m.params, SGDConfig{LR: decLR})
	if err != nil {
		return res, err
	}
	a, err := NewAsyncModelAverage(inner, coll, AsyncConfig{Interval: 2 * time.Millisecond})
	if err != nil {
		return res, err
	}
	for s := range plan.steps {
		switch s {
		case plan.abortAt:
			if err := a.Abort(ctx); err != nil {
				return res, fmt.Errorf("abort before step %d: %w", s, err)
			}
			if !a.Paused() {
				return res, errors.New("not paused after Abort")
			}
			res.pausedRounds = a.Rounds()
		case plan.resumeAt:
			if a.Rounds() != res.pausedRounds {
				return res, fmt.Errorf("%d rounds while paused", a.Rounds()-res.pausedRounds)
			}
			a.Resume()
		}
		if err := linearStep(ctx, m, a, s%8, rank, n); err != nil {
			return res, err
		}
		time.Sleep(time.Duration(rank+1) * 200 * time.Microsecond)
	}
	if err := a.Finish(ctx); err != nil {
		return res, fmt.Errorf("finish: %w", err)
	}
	res.x, res.rounds = append(slices.Clone(m.w), m.b...), a.Rounds()
	return res, nil
}

// checkAsync checks that every rank ended with the same weights, bit for
// bit, after at least minRounds rounds.
func checkAsync(res []asyncResult, minRounds int) error {
	for r, x := range res {
		if !slices.Equal(x.x, res[0].x) {
			return fmt.Errorf("rank %d ends with %v, rank 0 with %v", r, x.x, res[0].x)
		}
		if x.rounds < minRounds {
			return fmt.Errorf("rank %d completed %d rounds, want at least %d", r, x.rounds, minRounds)
		}
	}
	return nil
}

// asyncPlans are the scenarios: different step counts; aborts at
// different steps, a resume, and different step counts again.
func asyncPlans(rank int) map[string]asyncPlan {
	return map[string]asyncPlan{
		"uneven-steps":        {steps: 30 + 20*rank, abortAt: -1, resumeAt: -1},
		"abort-resume-uneven": {steps: 60 + 10*rank, abortAt: 10 + 5*rank, resumeAt: 45},
	}
}

func TestAsyncModelAverage(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		rts := startRuntimes(t, n)
		for _, name := range []string{"uneven-steps", "abort-resume-uneven"} {
			t.Run(fmt.Sprintf("np%d/%s", n, name), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res := make([]asyncResult, n)
				onRanks(t, n, func(rank int) error {
					coll, err := FromRuntime(rts[rank])
					if err != nil {
						return err
					}
					res[rank], err = asyncRun(ctx, coll, rank, n, asyncPlans(rank)[name])
					return err
				})
				if err := checkAsync(res, 2); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestAsyncKeepsLocalProgress: a round applies x += mean − snapshot, so
// the progress a rank made while the round was in flight survives it.
func TestAsyncKeepsLocalProgress(t *testing.T) {
	ps := []Param{{Name: "x", Value: tensor.FromFloat64([]float64{10, 20}), Grad: tensor.FromFloat64([]float64{0, 0})}}
	buf, snap := tensor.FromFloat64([]float64{4, 6, 0}), tensor.FromFloat64([]float64{2, 4})
	addDelta(ps, buf, snap) // snapshot (2, 4), mean (4, 6), local progress (8, 16)
	if got := ps[0].Value.Float64s(); !slices.Equal(got, []float64{12, 22}) {
		t.Fatalf("after the swap: %v, want [12 22]", got)
	}
}

func TestAsyncBadSettings(t *testing.T) {
	coll, inner := oneRank(t)
	for _, iv := range []time.Duration{0, -time.Second} {
		if _, err := NewAsyncModelAverage(inner, coll, AsyncConfig{Interval: iv}); !errors.Is(err, ErrAveraging) {
			t.Fatalf("interval %v: %v, want ErrAveraging", iv, err)
		}
	}
}
