// Package mlp is a small multi-layer perceptron in plain Go (float32, with
// gonum's blas32 for the matrix products): fully connected layers with ReLU
// between them and a softmax cross-entropy loss, forward and backward.
//
// Its parameters are optim.Params that wrap the model's own slices, and
// Backward hands each parameter to a callback as soon as its gradient is
// final, last layer first: the point where a DistributedOptimizer starts
// that gradient's allreduce while the earlier layers are still being
// differentiated. WithNorms puts a normalisation layer (a Norm, such as
// optim/nn's BatchNorm, local or synchronised across ranks) between each
// hidden layer and its ReLU; Predict runs it in evaluation mode.
package mlp
