package autotune

import (
	"math"
	"time"
)

// MB is the number of bytes in the megabyte of the fusion threshold knob.
const MB = 1 << 20

// Params is one setting of the tuned knobs.
type Params struct {
	// FusionBytes is the tensor fusion threshold in bytes.
	FusionBytes int64
	// CycleTime is the background loop's cycle time.
	CycleTime time.Duration
	// HierarchicalAllreduce selects the hierarchical allreduce.
	HierarchicalAllreduce bool
	// HierarchicalAllgather selects the hierarchical allgather.
	HierarchicalAllgather bool
	// CacheEnabled enables the response cache.
	CacheEnabled bool
	// ChunkBytes is the largest buffer handed to one transport
	// collective (the runtime's WithChunkBytes).
	ChunkBytes int64
	// FusionChunkBytes is how much of a fused response is copied in,
	// reduced and copied out at a time (the runtime's
	// WithFusionChunkBytes).
	FusionChunkBytes int64
}

// Dim is one named, bounded numeric knob of the Bayesian search. Get and
// Set convert between Params and the knob's value in its natural unit
// (the unit of Min, Max and Seeds).
type Dim struct {
	// Name names the knob (also the key of Fixed.Dims).
	Name string
	// Min and Max bound the knob's value.
	Min, Max float64
	// Seeds are the knob's coordinates of the test points sampled, in
	// order, before expected improvement takes over; every Dim of a space
	// must have the same number of them.
	Seeds []float64
	// Get reads the knob's value from p.
	Get func(p Params) float64
	// Set writes value v of the knob into p.
	Set func(p *Params, v float64)
}

// Names of the default numeric dimensions.
const (
	DimFusionMB    = "tensor_fusion_threshold"
	DimCycleTimeMs = "cycle_time_ms"
)

// DefaultDims returns Horovod's joint numeric space: the fusion threshold
// in MB in [0, 64] and the cycle time in ms in [1, 100], seeded with the
// test points (4, 5), (32, 50), (16, 25), (8, 10).
func DefaultDims() []Dim {
	return []Dim{
		{
			Name: DimFusionMB, Min: 0, Max: 64,
			Seeds: []float64{4, 32, 16, 8},
			Get:   func(p Params) float64 { return float64(p.FusionBytes) / MB },
			Set:   func(p *Params, v float64) { p.FusionBytes = int64(math.Round(v * MB)) },
		},
		{
			Name: DimCycleTimeMs, Min: 1, Max: 100,
			Seeds: []float64{5, 50, 25, 10},
			Get:   func(p Params) float64 { return float64(p.CycleTime) / float64(time.Millisecond) },
			Set: func(p *Params, v float64) {
				p.CycleTime = time.Duration(math.Round(v * float64(time.Millisecond)))
			},
		},
	}
}

func (d Dim) normalise(v float64) float64 {
	if d.Max == d.Min {
		return 0
	}
	return math.Min(1, math.Max(0, (v-d.Min)/(d.Max-d.Min)))
}

func (d Dim) denormalise(u float64) float64 { return d.Min + u*(d.Max-d.Min) }

// Bool is one categorical (boolean) knob of the chain.
type Bool struct {
	// Name names the knob (the CSV column).
	Name string
	// Get reads the knob from p.
	Get func(p Params) bool
	// Set writes the knob into p.
	Set func(p *Params, v bool)
}

// Names of the boolean knobs, in chain order.
const (
	BoolHierarchicalAllreduce = "hierarchical_allreduce"
	BoolHierarchicalAllgather = "hierarchical_allgather"
	BoolCacheEnabled          = "cache_enabled"
)

// DefaultBools returns the categorical chain in Horovod's order:
// hierarchical allreduce, hierarchical allgather, response cache.
func DefaultBools() []Bool {
	return []Bool{
		{BoolHierarchicalAllreduce,
			func(p Params) bool { return p.HierarchicalAllreduce },
			func(p *Params, v bool) { p.HierarchicalAllreduce = v }},
		{BoolHierarchicalAllgather,
			func(p Params) bool { return p.HierarchicalAllgather },
			func(p *Params, v bool) { p.HierarchicalAllgather = v }},
		{BoolCacheEnabled,
			func(p Params) bool { return p.CacheEnabled },
			func(p *Params, v bool) { p.CacheEnabled = v }},
	}
}

// Choice is one knob of the chain that takes one of a few values (the
// runtime's own piece sizes, which Horovod does not have). The chain
// scores each value in turn on top of the best setting so far and keeps
// the best; on a tie the earlier value stays, so the first value should
// be the default.
type Choice struct {
	// Name names the knob (the CSV column, and the key of Fixed).
	Name string
	// Values are the values tried, in order.
	Values []int64
	// Get reads the knob from p.
	Get func(p Params) int64
	// Set writes the knob into p.
	Set func(p *Params, v int64)
}

// Names of the runtime's choice knobs, in chain order.
const (
	ChoiceChunkBytes       = "chunk_bytes"
	ChoiceFusionChunkBytes = "fusion_chunk_bytes"
)

// DefaultChoices returns the runtime's piece sizes as choices, each with
// the given default first: the transport chunk among default, 1, 16 MiB,
// and the fusion copy piece among default, 64 KiB, 1 MiB.
func DefaultChoices(chunk, fusionChunk int64) []Choice {
	values := func(def int64, alt ...int64) []int64 {
		vs := []int64{def}
		for _, v := range alt {
			if v != def {
				vs = append(vs, v)
			}
		}
		return vs
	}
	return []Choice{
		{ChoiceChunkBytes, values(chunk, 1<<20, 16<<20),
			func(p Params) int64 { return p.ChunkBytes },
			func(p *Params, v int64) { p.ChunkBytes = v }},
		{ChoiceFusionChunkBytes, values(fusionChunk, 64<<10, 1<<20),
			func(p Params) int64 { return p.FusionChunkBytes },
			func(p *Params, v int64) { p.FusionChunkBytes = v }},
	}
}

// knob is one link of the chain: a Bool (false, then true) or a Choice.
type knob struct {
	name   string
	values []int64
	set    func(p *Params, v int64)
}

func boolKnob(b Bool) knob {
	return knob{b.Name, []int64{0, 1}, func(p *Params, v int64) { b.Set(p, v != 0) }}
}

func choiceKnob(c Choice) knob { return knob{c.Name, c.Values, c.Set} }
