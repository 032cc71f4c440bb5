// Package gonumopt runs gonum's optimize package data-parallel: every rank
// holds a shard of the data, and an Objective turns the rank's local loss,
// gradient and Hessian into an optimize.Problem whose values are the global
// ones, averaged across ranks through gohorovod's allreduce. Any
// deterministic gonum method (BFGS, LBFGS, CG, GradientDescent, Newton,
// NelderMead) then follows the same path on every rank and ends at the
// minimiser that one process on the whole data would find.
//
//	coll, _ := optim.FromRuntime(hvd.Default())
//	obj, err := gonumopt.New(coll, gonumopt.Local{
//		Func:   shard.Loss,     // mean loss over this rank's samples
//		Grad:   shard.Gradient, // its gradient
//		Weight: float64(shard.Len()),
//	})
//	res, err := optimize.Minimize(obj.Problem(), x0, nil, &optimize.BFGS{})
//
// With Weight the number of samples of each rank's shard and Func the mean
// loss over them, the global objective is the mean loss over all samples,
// however unevenly the data is split.
package gonumopt
