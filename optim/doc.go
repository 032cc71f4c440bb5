// Package optim holds the optimizers and learning-rate schedules of a
// training loop, in the shape that data-parallel training needs.
//
// An Optimizer works over named parameters (Param: a value tensor and its
// gradient, float32 or float64, usually wrapping the model's own slices).
// SGD (with momentum, Nesterov momentum and weight decay), Adam, AdamW,
// RMSProp and Adagrad follow the update rules that PyTorch documents, so that
// hyper-parameters carry over. Every optimizer allocates its per-parameter
// state when it is built and exposes all of it as a State (tensors by name
// plus scalar hyper-parameters and the step count), which can be saved,
// restored with SetState for an identical continuation, and broadcast from
// one rank to the others before training starts.
//
// Schedules give the learning rate as a function of the (fractional)
// epoch: Constant, StepDecay, Cosine, and Warmup, the gradual warmup of
// Goyal et al. (arXiv 1706.02677) that Horovod recommends when the learning
// rate is scaled by the number of workers. They compose:
//
//	lr := optim.Warmup(optim.StepDecay(base*float64(size), 0.1, 30, 60, 80), size, 5)
//	opt.SetLR(lr.LR(epoch))
//
// NewDistributed wraps any Optimizer for data-parallel training over a
// Collectives (FromRuntime adapts the gohorovod runtime): each gradient's
// allreduce starts as soon as backward reports it Ready, and Step waits for
// them before the wrapped step. Options choose the reduction (WithOp:
// Average, Sum or Adasum), local accumulation (BackwardPassesPerStep),
// half-precision transport (WithCompression: FP16 or BF16), a
// GradientPredivideFactor, and parameter groups reduced as one unit
// (Groups, NumGroups). On the runtime the gradients are reduced in
// buckets (BucketBytes) that are each a held AllreduceGroup, so that the
// runtime negotiates them once and reduces gradients that lie back to
// back in one buffer in place; Close releases them. The gradients stay in
// the storage the model gave them; FlatGradients(true) moves them into
// one flat buffer in backward order, for a model that reaches them through
// Param.Grad alone. WithCommHook replaces how each bucket of gradients is
// communicated (a CommHook, PyTorch DDP's communication hook): PowerSGD's
// low-rank compression is built in, and users can write their own. A
// gradient never reported Ready is reduced at Step as it
// is: Ready only overlaps communication with backward. WithOp takes the
// project's one ReduceOp type (tensor.ReduceOp, which hvd.ReduceOp names;
// optim.Average is hvd.Average). BroadcastParameters and BroadcastState start every
// rank from the same weights and optimizer state; BroadcastObject and
// AllgatherObject move arbitrary gob-encodable Go values between ranks;
// Metric and AverageMetrics average evaluation metrics over every rank's
// samples. Sharding a data set by rank is in the data sub-package.
//
// NewPostLocalSGD wraps a DistributedOptimizer for post-local SGD: its
// synchronous steps first, then local steps without gradient allreduce
// whose parameters a ModelAverager averages every ModelAveragingPeriod
// steps, optionally within each node more often (AveragingLevel, over a
// node's process set) and with the optimizer state (AverageState).
//
// Beyond gradient allreduce, Bagua's 8-bit algorithms run on the same
// Collectives (they need its optional AlltoallCollectives and
// GatherCollectives, which FromRuntime provides): NewByteGrad is a
// CommHook that cuts each bucket into one chunk per rank, quantizes each
// chunk to 8 bits with its own min and max (QuantizeMinMaxUint8), sends
// it to its owner (alltoall), which averages and re-quantizes it for an
// allgather, with optional error feedback; NewQAdam is Adam whose
// warm-up steps are exact, after which its Hook averages 8-bit momenta
// and the second moment stays frozen. NewZero shards the optimizer state
// (ZeRO stages 1 and 2): the flat parameter space is cut into one equal
// element range per rank (ShardRange), each rank's wrapped optimizer holds
// and updates only its range, and the ranks gather the new values;
// ConsolidateState gathers the whole state, and SetState re-shards one at
// any size.
//
// Three of Bagua's algorithms exchange weights instead of gradients, each
// wrapping a plain Optimizer over an ExchangeCollectives (the runtime's
// point-to-point Exchange, which FromRuntime and FromProcessSet provide):
// NewDecentralized (decentralized SGD: the weights averaged, before each
// step, with every rank or with one ShiftOne peer, optionally every few
// steps and hierarchically over nodes), NewLowPrecisionDecentralized (a
// ring whose ranks send their neighbours 8-bit quantized weight changes,
// QuantizeMinMaxUint8, and keep exact replicas of them) and
// NewAsyncModelAverage (background averaging rounds while every rank
// steps at its own pace, with collective Abort, Resume and Finish).
package optim
