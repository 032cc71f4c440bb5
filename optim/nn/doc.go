// Package nn holds neural-network layers whose training needs the ranks
// of a data-parallel job to cooperate: for now BatchNorm, batch
// normalisation over the features of n×C inputs (float32 or float64),
// local or synchronised across ranks (PyTorch's BatchNorm1d and
// SyncBatchNorm).
//
// A BatchNorm's learnable weight and bias are optim.Params, so a
// DistributedOptimizer reduces their gradients like any other
// parameter's; its running mean and variance follow PyTorch's formulas.
// Built with Sync(coll), on the Collectives that the optimizer uses
// (optim.FromRuntime, or optim.FromProcessSet to normalise within a
// process set), a training-mode Forward normalises with the statistics of
// the batch that all ranks hold together: each rank's row count, per-feature
// sums and sums of squares travel in one fused float64 allreduce, and the
// mean and variance are weighted by the ranks' row counts, so uneven
// batches are exact and a rank with no rows takes part with zeros.
// Backward adds up the ranks' Σdy and Σdy·xhat in one allreduce more.
// The collectives are named after the layer (name+".syncbn.stats" and
// name+".syncbn.grads"), the same names every step, which the runtime's
// response cache serves cheaply.
//
// # Which gradient a sync layer computes
//
// Given each rank's rows x_r and the gradients dy_r of some loss with
// respect to the layer's outputs, a sync layer's Forward returns rank r's
// rows of what one process returns for the concatenated batch, and its
// Backward returns rank r's rows of the dx that one process returns for the
// concatenated batch and the concatenated dy; the weight and bias
// gradients it adds are rank r's own sums, Σ over its rows of dy·xhat and
// dy, whose sum over ranks is the single process's. (The tests check
// exactly these equalities.)
//
// Under a DistributedOptimizer, which averages the parameter gradients of
// R ranks, this is PyTorch's convention: when each rank's loss is the mean
// over its own rows (dy_r = ∂ℓ/∂y / n_r) and every rank has n rows, the
// averaged gradients of every parameter, before and after the layer, are
// exactly those of one process training on the R·n rows with the mean
// loss (the layer's dx is R times the single process's, which the
// averaging of the earlier layers' gradients divides back). With uneven
// batches, local means weight each rank's rows by 1/(R·n_r) instead of 1/N;
// for the single process's mean over the N rows, scale each rank's
// summed loss by R/N (N: the total row count).
//
// Every rank of a sync layer's Collectives must call Forward and Backward
// in the same order and mode. Errors are returned, never panicked: a
// rank given bad input still takes part in the collective, marking it, so
// that the other ranks return ErrRemoteInput instead of waiting forever.
package nn
