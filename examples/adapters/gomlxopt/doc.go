// Package gomlxopt trains GoMLX models data parallel over gohorovod.
//
// GoMLX (github.com/gomlx/gomlx) compiles a training step into one graph;
// its optimizers build the variable updates inside it. A Trainer splits the
// step in two compiled graphs and puts gohorovod between them: the gradient
// graph runs the model and the loss and outputs the gradient of every
// trainable variable; the host allreduces the gradients (Average by default,
// optionally sent as FP16 or BF16); the apply graph hands the reduced
// gradients to the GoMLX optimizer's UpdateGraphWithGradients (SGD and Adam
// implement it) and runs the per-step update hooks. The variables and the
// optimizer state stay in the user's GoMLX Context, so GoMLX's checkpoints
// save and restore them, and its own graphs (evaluation, inference) read
// them.
//
// The first step broadcasts every variable from rank 0, so that all ranks
// start, and stay, identical. SetLR sets the learning rate (Horovod scales
// one process's rate by the number of ranks: ScaleLR, with optim.Warmup).
// ElasticHandler gives the variables and optimizer state to an elastic
// State; the handler is an elastic.Codec, so the same State, with an
// elastic.Sampler and the step beside the variables, is what
// optim/checkpoint writes to disk and loads back on every rank, and a
// killed job resumes where it was (docs/CHECKPOINTS.md). Shard the data with optim/data's Sampler. Errors of the runtime and
// failures of GoMLX reach the caller as errors.
//
// Use GoMLX's pure-Go backend (github.com/gomlx/gomlx/backends/simplego) to
// need no C library. The mnistcnn command trains a convolutional network on
// MNIST this way under gohorovodrun.
//
// What GoMLX does not allow yet, and the change that would:
//
//   - The allreduce cannot overlap the backward pass: a compiled graph cannot
//     hand a gradient to the host while it runs, and the Go backend's
//     AllReduce op is not implemented. A backend collective that calls out
//     to a user-supplied implementation (or a host-callback op) would let
//     each gradient's allreduce start inside the graph; here the gradients'
//     allreduces overlap only each other and their copies.
//   - train.Loop takes a *train.Trainer, not an interface, so this Trainer
//     cannot drive it; a TrainStep interface, or a hook on train.Trainer
//     between computing the gradients and applying them (its
//     AccumulateGradients mode already splits the two), would make the loop,
//     its callbacks and its checkpoints work unchanged.
//   - Exec.PreCompile hands the buffers of the variables a graph changes to
//     the executable and drops their values, so the apply graph is compiled
//     by running it once on zero gradients and restoring the variables.
//   - The Go backend cannot differentiate Convolution (the Reverse op), Slice
//     (Pad) or MaxPool (SelectAndScatterMax); implementing those three ops
//     in the backend would let a model use GoMLX's conv and pooling layers.
//     mnistcnn works around it: the first convolution's patches are cut on
//     the host, the second is a strided 2×2 convolution written as a reshape
//     and a transpose, and strides replace pooling.
//   - GoMLX differentiates DotGeneral as a broadcast product over every
//     (row, inner, column) triple and a reduction, not as two matrix
//     products; on the Go backend that costs over ten times the two
//     products, and dominated the step. mnistcnn's matmul gives the product
//     its own gradients through IdentityWithCustomGradient (the only
//     gradient hook GoMLX exports, on one node). A DotGeneral gradient
//     written as DotGenerals, or an exported way to set a node's VJP, would
//     make that unnecessary.
//   - The Go backend's parallel executor deadlocks with one worker when a
//     DotGeneral waits for a worker that the executor holds, and it trips
//     the race detector: mnistcnn and the tests use "ops_sequential" (the
//     matrix products still use the workers).
package gomlxopt
