// Package autotune is the decision core of Horovod-style autotuning as a
// pure state machine: no clock, no goroutines and no I/O besides an
// io.Writer for the CSV log. The runtime calls Tuner.Observe once per
// training step with that step's allreduced bytes and duration
// and applies the Params it returns.
//
// As in Horovod's parameter_manager, the numeric knobs (fusion threshold in
// MB and cycle time in ms) are tuned jointly by Bayesian optimisation: a
// Gaussian process (GP) with an RBF kernel over inputs normalised to
// [0,1]^d, seeded with fixed test points and then driven by expected
// improvement (ExpectedImprovement, MaximizeEI). Then the boolean knobs are
// tried one after another in chain order (hierarchical allreduce,
// hierarchical allgather, response cache), each keeping the better value.
// Knobs the user set explicitly are fixed and left out of the search.
//
// The numeric space is a list of named bounded dimensions (Dim), so that a
// further numeric knob is added by appending one Dim to DefaultDims.
package autotune
