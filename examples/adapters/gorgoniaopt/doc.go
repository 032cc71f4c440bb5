// Package gorgoniaopt trains gorgonia models data-parallel with gohorovod:
// Solver wraps any gorgonia.Solver (Vanilla, Momentum, Adam, RMSProp, ...)
// so that each node's gradient is averaged across ranks, through the
// runtime's fused allreduce, before the wrapped solver's Step. Broadcast
// gives every rank the root's initial weights.
//
//	coll, _ := optim.FromRuntime(hvd.Default())
//	model := gorgonia.NodesToValueGrads(learnables)
//	if err := gorgoniaopt.Broadcast(ctx, coll, model, 0); err != nil { ... }
//	solver := gorgoniaopt.New(gorgonia.NewAdamSolver(gorgonia.WithLearnRate(0.01)), coll)
//	for each batch shard {
//		vm.RunAll()
//		solver.Step(model)
//		vm.Reset()
//	}
//
// This package is its own Go module, so that gohorovod's core module does
// not depend on gorgonia. gorgonia v0.9.18 needs
// go4.org/unsafe/assume-no-moving-gc at v0.0.0-20231121144256-b99613f794b6
// or newer to start on current Go releases; this module pins it.
package gorgoniaopt
