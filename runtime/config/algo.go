package config

import (
	"fmt"
	"slices"
	"strings"
)

// The embedded transport's algorithm knobs (gohorovod's own), as Open
// MPI's coll_tuned and NCCL_ALGO force theirs: AlgoAuto, or empty (the
// default), chooses by size; the others force one algorithm whatever the size (see
// package runtime/comm/embedded, "Algorithms, chosen by size").
const (
	// EnvEmbeddedAllgather forces the embedded transport's allgather:
	// auto, direct (every rank to every other), bruck (Bruck's, log2 n
	// rounds) or ring.
	EnvEmbeddedAllgather = "GOHOROVOD_EMBEDDED_ALLGATHER"
	// EnvEmbeddedAllreduce forces the embedded transport's allreduce:
	// auto, doubling (recursive doubling) or ring.
	EnvEmbeddedAllreduce = "GOHOROVOD_EMBEDDED_ALLREDUCE"
)

// AlgoAuto is the value of the algorithm knobs that lets the transport
// choose by size.
const AlgoAuto = "auto"

// The algorithms each knob accepts, AlgoAuto first.
var (
	allgatherAlgos = []string{AlgoAuto, "direct", "bruck", "ring"}
	allreduceAlgos = []string{AlgoAuto, "doubling", "ring"}
)

// algoKnob reads one of algos, in any case.
func algoKnob(env string, algos []string, field func(*Config) *string) knob {
	return knob{env,
		func(c *Config) string { return *field(c) },
		func(c *Config, s string) error {
			v := strings.ToLower(strings.TrimSpace(s))
			if !slices.Contains(algos, v) {
				return badAlgo(algos)
			}
			*field(c) = v
			return nil
		}}
}

// badAlgo is the error of a value that is none of algos.
func badAlgo(algos []string) error {
	return fmt.Errorf("must be one of %s", strings.Join(algos, ", "))
}

// validateAlgos reports an algorithm knob of c whose value its collective
// does not have ("" is AlgoAuto).
func (c Config) validateAlgos() error {
	for _, k := range []struct {
		env, v string
		algos  []string
	}{
		{EnvEmbeddedAllgather, c.EmbeddedAllgather, allgatherAlgos},
		{EnvEmbeddedAllreduce, c.EmbeddedAllreduce, allreduceAlgos},
	} {
		if k.v != "" && !slices.Contains(k.algos, k.v) {
			return &EnvError{Var: k.env, Value: k.v, Err: badAlgo(k.algos)}
		}
	}
	return nil
}
