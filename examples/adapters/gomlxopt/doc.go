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
// State. Shard the data with optim/data's Sampler. Errors of the runtime and
// failures of GoMLX reach the caller as errors.
//
// Use GoMLX's pure-Go backend (github.com/gomlx/gomlx/backends/simplego) to
// need no C library.
package gomlxopt
