package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/mpi"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// summed fills tensors of the given sizes with what an allreduce Sum over n
// ranks of fillRanked's values gives.
func summed(n int, sizes ...int) []*tensor.Tensor {
	ts := make([]*tensor.Tensor, len(sizes))
	for i, sz := range sizes {
		ts[i] = tensor.New(tensor.Float32, sz)
		v := ts[i].Float32s()
		for j := range v {
			for r := 0; r < n; r++ {
				v[j] += pattern(i, j) + float32(r+1)
			}
		}
	}
	return ts
}

func TestVerifyCountsEveryElement(t *testing.T) {
	ts := summed(3, 5, 1, 40)
	got, err := verify("c", ts, sumOver(3), 0)
	if err != nil || got != 46 {
		t.Fatalf("verify = %d, %v; want 46, nil", got, err)
	}
}

func TestVerifyNamesTheWrongElement(t *testing.T) {
	for _, bad := range []float32{0, float32(math.NaN()), float32(math.Inf(1))} {
		ts := summed(2, 5, 7, 3)
		ts[1].Float32s()[4] = bad
		want := expectedSum(1, 4, 2)
		_, err := verify("resnet50", ts, sumOver(2), 0)
		if err == nil {
			t.Fatalf("element 4 of tensor 1 set to %v: no error", bad)
		}
		for _, s := range []string{"case resnet50", "tensor 1", "element 4", "got " + fmt.Sprint(bad), "want " + fmt.Sprint(want)} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not name %q", err, s)
			}
		}
	}
}

func TestVerifyLastElement(t *testing.T) {
	ts := summed(2, 3, 3)
	ts[1].Float32s()[2]++ // an exact sum is wanted
	_, err := verify("c", ts, sumOver(2), 0)
	if err == nil || !strings.Contains(err.Error(), "tensor 1 element 2:") {
		t.Fatalf("err = %v; want tensor 1 element 2 named", err)
	}
}

func TestVerifyTolerance(t *testing.T) {
	ts := []*tensor.Tensor{tensor.FromFloat32([]float32{float32(10.0 / 3)})}
	want := func(float32) float64 { return 10.0 / 3 }
	if _, err := verify("c", ts, want, averageTol(3)); err != nil {
		t.Fatalf("within tolerance: %v", err)
	}
	ts[0].Float32s()[0] = 3.3
	if _, err := verify("c", ts, want, averageTol(3)); err == nil {
		t.Fatal("3.3 for 10/3 accepted")
	}
	if averageTol(2) != 0 || averageTol(8) != 0 || averageTol(1) != 0 {
		t.Fatal("averages over a power of two ranks are exact")
	}
}

// TestMeasureChecksEveryStep: measure sets the inputs before, and checks
// the result after, every step (warm-up and timed), outside the timer; a
// step whose result is wrong fails the case, naming the step, even when
// the steps after it are right; the final check runs once.
func TestMeasureChecksEveryStep(t *testing.T) {
	rt := new(hvd.Runtime)
	if err := rt.Init(hvd.WithLogger(zerolog.Nop())); err != nil { // one rank
		t.Fatal(err)
	}
	defer rt.Shutdown()
	ctl := &rtControl{rt: rt}
	a := workerArgs{iters: 4, warmup: 2}
	for _, badStep := range []int{-1, 1, 99} { // 99: none
		t.Run(fmt.Sprint(badStep), func(t *testing.T) {
			ts := []*tensor.Tensor{tensor.New(tensor.Float32, 10)}
			steps, prepared, checked, finals := 0, 0, 0, 0
			c, err := allreduceBench(rt, fmt.Sprintf("c%d", badStep+2), []int{10})
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			inner := c.step
			c.step = func() error {
				if prepared != steps+1 {
					return fmt.Errorf("step %d ran with its inputs set %d times", steps, prepared)
				}
				steps++
				return inner()
			}
			innerPrepare, innerCheck := c.prepare, c.check
			c.prepare = func() { prepared++; innerPrepare() }
			c.check = func() (int, error) {
				checked++
				if steps-1-a.warmup == badStep {
					ts[0].Float32s()[3] = 1 // not the sum
					return verify("c", ts, func(float32) float64 { return 0 }, 0)
				}
				return innerCheck()
			}
			c.final = func() (int, error) { finals++; return 0, nil }
			_, err = measure(rt, ctl, "c", c, a)
			switch {
			case badStep == 99 && err != nil:
				t.Fatal(err)
			case badStep != 99 && (err == nil || !strings.Contains(err.Error(), fmt.Sprintf("step %d:", badStep))):
				t.Fatalf("a wrong result at step %d: %v", badStep, err)
			}
			if steps != a.warmup+a.iters || finals != 1 {
				t.Fatalf("%d steps, %d final checks; want %d, 1", steps, finals, a.warmup+a.iters)
			}
			if want := a.warmup + a.iters; badStep == 99 && checked != want {
				t.Fatalf("%d checks of %d steps", checked, want)
			}
		})
	}
}

// TestMeasureSetsInputsBeforeTheBarrier: a rank that is slow to set its
// inputs does not add its delay to the others' step times, as a yardstick
// that lines the ranks up right before each step would not: the inputs are
// set before the barrier, and the clock starts after it.
func TestMeasureSetsInputsBeforeTheBarrier(t *testing.T) {
	const delay = 40 * time.Millisecond
	a := workerArgs{iters: 3, warmup: 1}
	times := make([][]float64, 2)
	err := hvd.RunLocal(2, func(rt *hvd.Runtime, rank int) error {
		c, err := allreduceBench(rt, "slowprep", []int{16})
		if err != nil {
			return err
		}
		defer c.close()
		inner := c.prepare
		c.prepare = func() {
			if rank == 1 {
				time.Sleep(delay)
			}
			inner()
		}
		res, err := measure(rt, &rtControl{rt: rt}, "slowprep", c, a)
		times[rank] = res.times
		return err
	}, hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	for rank, ts := range times {
		if len(ts) != a.iters {
			t.Fatalf("rank %d: %d times; want %d", rank, len(ts), a.iters)
		}
		for i, d := range ts {
			if time.Duration(d*float64(time.Second)) >= delay {
				t.Errorf("rank %d step %d took %v: rank 1's input delay of %v was timed", rank, i, time.Duration(d*1e9), delay)
			}
		}
	}
}

// TestPatternWalk: walking a tensor with next gives pattern at every
// element, across the wraps, and fillRanked writes pattern + rank + 1.
func TestPatternWalk(t *testing.T) {
	ts := []*tensor.Tensor{tensor.New(tensor.Float32, 40), tensor.New(tensor.Float32, 1), tensor.New(tensor.Float32, 29)}
	fillRanked(ts, 2)
	for i, tt := range ts {
		p := pattern(i, 0)
		for j, got := range tt.Float32s() {
			if p != pattern(i, j) {
				t.Fatalf("tensor %d element %d: walked to pattern %v, want %v", i, j, p, pattern(i, j))
			}
			if got != pattern(i, j)+3 {
				t.Fatalf("tensor %d element %d: fillRanked wrote %v, want %v", i, j, got, pattern(i, j)+3)
			}
			p = next(p)
		}
	}
}

// twoRanks is a control that plays rank 0 of two: an allreduce Sum adds
// what rank 1's fillRanked would hold (each value plus one), wrong by one
// at element 0 of the Sum call numbered bad; Max leaves the tensor as it
// is. It records whether its agreement check was on at each Sum.
type twoRanks struct {
	check      bool
	sums, bad  int
	checkedSum []bool
}

func (c *twoRanks) Rank() int      { return 0 }
func (c *twoRanks) Size() int      { return 2 }
func (c *twoRanks) Barrier() error { return nil }
func (c *twoRanks) SetCheck(on bool) {
	c.check = on
}
func (c *twoRanks) Check() bool { return c.check }
func (c *twoRanks) Allreduce(t *tensor.Tensor, op tensor.ReduceOp) error {
	if op != tensor.Sum {
		return nil
	}
	c.checkedSum = append(c.checkedSum, c.check)
	v := t.Float32s()
	for j := range v {
		v[j] = 2*v[j] + 1
	}
	if c.sums == c.bad {
		v[0]++
	}
	c.sums++
	return nil
}

// TestRunDirect: the direct call is made once per step on the whole flat
// buffer, with the communicator's agreement check off and restored after,
// and every step's result is checked.
func TestRunDirect(t *testing.T) {
	a := workerArgs{iters: 5, warmup: 2}
	counts := []int{3, 1024, 5}
	for _, bad := range []int{-1, 4} { // the Sum call made wrong; -1: none
		ctl := &twoRanks{check: true, bad: bad}
		err := runDirect(ctl, "x"+flatSuffix, counts, a)
		if want := a.warmup + a.iters; ctl.sums != want {
			t.Fatalf("%d calls for %d steps", ctl.sums, want)
		}
		for i, on := range ctl.checkedSum {
			if on {
				t.Fatalf("call %d made with the agreement check on", i)
			}
		}
		if !ctl.check {
			t.Fatal("the agreement check was left off")
		}
		switch {
		case bad < 0 && err != nil:
			t.Fatal(err)
		case bad >= 0 && (err == nil || !strings.Contains(err.Error(), fmt.Sprintf("step %d:", bad-a.warmup))):
			t.Fatalf("a wrong sum in call %d: %v", bad, err)
		}
	}
}

// TestRuntimeMPISettings: the yardstick's second run asks for the
// runtime's thread level, and yields while it waits unless the
// environment chose.
func TestRuntimeMPISettings(t *testing.T) {
	t.Setenv(mpi.YieldEnv, "")
	os.Unsetenv(mpi.YieldEnv)
	if got := strings.Join(runtimeMPISettings(), " "); got != "OMPI_MPI_THREAD_LEVEL=3 "+mpi.YieldEnv+"=1" {
		t.Fatalf("settings %q", got)
	}
	t.Setenv(mpi.YieldEnv, "0")
	if got := strings.Join(runtimeMPISettings(), " "); got != "OMPI_MPI_THREAD_LEVEL=3" {
		t.Fatalf("with the yield chosen in the environment: settings %q", got)
	}
}

// TestNeeded: a run times only the yardsticks its cases are compared with.
func TestNeeded(t *testing.T) {
	for _, tc := range []struct {
		set   string
		cases []string
		want  bool
	}{
		{"4KiBx1000", []string{"4KiBx1000" + flatSuffix}, true},
		{"4KiBx1000", []string{"4KiBx1000"}, true},
		{"resnet50", []string{"4KiBx1000" + flatSuffix}, false},
		{"resnet50", []string{optimizerCase}, true},
		{"64MiB", []string{"resnet50", "tinyx161"}, false},
		{"tinyx161", []string{"resnet50", "tinyx161"}, true},
	} {
		if got := needed(tc.set, tc.cases); got != tc.want {
			t.Errorf("needed(%q, %q) = %v; want %v", tc.set, tc.cases, got, tc.want)
		}
	}
	if flatOf("4KiBx1000", []string{"4KiBx1000", "64MiB"}) || !flatOf("4KiBx1000", []string{"64MiB", "4KiBx1000" + flatSuffix}) {
		t.Error("flatOf")
	}
}
