package optim

import (
	"fmt"
	"math"
	"sort"
)

// Schedule gives the learning rate as a function of the epoch, counted
// fractionally: epoch e, batch b of n is at e + (b+1)/n, as Horovod's
// examples count it.
type Schedule interface {
	LR(epoch float64) float64
}

// ScheduleFunc adapts a function to a Schedule.
type ScheduleFunc func(epoch float64) float64

// LR returns f(epoch).
func (f ScheduleFunc) LR(epoch float64) float64 { return f(epoch) }

// Constant returns the schedule that is lr at every epoch.
func Constant(lr float64) Schedule {
	return ScheduleFunc(func(float64) float64 { return lr })
}

// StepDecay returns base multiplied by gamma once for every milestone
// reached: at epoch e the rate is base·gamma^k, k the number of milestones
// <= e (PyTorch's MultiStepLR). Horovod's ImageNet example uses gamma 0.1 at
// epochs 30, 60 and 80.
func StepDecay(base, gamma float64, milestones ...float64) Schedule {
	ms := append([]float64(nil), milestones...)
	sort.Float64s(ms)
	return ScheduleFunc(func(e float64) float64 {
		k := sort.Search(len(ms), func(i int) bool { return ms[i] > e })
		return base * math.Pow(gamma, float64(k))
	})
}

// Cosine returns cosine annealing from base at epoch start to min at epoch
// end: base before start, min after end, and in between
// min + (base-min)·(1+cos(π·(e-start)/(end-start)))/2. It panics if end <=
// start.
func Cosine(base, min, start, end float64) Schedule {
	if !(end > start) {
		panic(fmt.Sprintf("optim: Cosine with end %g <= start %g", end, start))
	}
	return ScheduleFunc(func(e float64) float64 {
		switch {
		case e <= start:
			return base
		case e >= end:
			return min
		}
		return min + (base-min)*(1+math.Cos(math.Pi*(e-start)/(end-start)))/2
	})
}

// Scale returns s multiplied by factor: the learning rate scaled by the
// number of workers (factor = size, or size·backward passes per step, as
// Horovod recommends).
func Scale(s Schedule, factor float64) Schedule {
	return ScheduleFunc(func(e float64) float64 { return factor * s.LR(e) })
}

// WarmupFactor is the gradual-warmup multiplier of Goyal et al. (arXiv
// 1706.02677) as Horovod's examples compute it: 1/size·(e·(size-1)/epochs + 1)
// for e < epochs, and 1 from then on. Applied to a rate already scaled by
// size, it rises linearly from the unscaled rate at epoch 0 to the scaled one
// at epoch epochs.
func WarmupFactor(e float64, size int, epochs float64) float64 {
	if e >= epochs || size <= 1 {
		return 1
	}
	if e < 0 {
		e = 0
	}
	n := float64(size)
	return (e*(n-1)/epochs + 1) / n
}

// Warmup returns s with the gradual warmup of Goyal et al. over the first
// epochs: s.LR(e)·WarmupFactor(e, size, epochs). s is the schedule of the
// scaled rate (e.g. Scale(StepDecay(base, ...), size)). It panics if epochs
// <= 0 or size < 1.
func Warmup(s Schedule, size int, epochs float64) Schedule {
	if epochs <= 0 || size < 1 {
		panic(fmt.Sprintf("optim: Warmup with size %d, epochs %g", size, epochs))
	}
	return ScheduleFunc(func(e float64) float64 { return s.LR(e) * WarmupFactor(e, size, epochs) })
}
