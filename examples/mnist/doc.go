// Command mnist trains a multi-layer perceptron on the MNIST digits, on one
// process or data-parallel on many.
//
// Usage:
//
//	go run ./examples/mnist [--epochs 3] [--batch 64] [--lr 0.05] ...
//	go build -tags mpi -o bin/ ./examples/mnist && gohorovodrun -np 2 bin/mnist
//
// Each epoch, rank 0 prints the mean training loss, the test accuracy,
// the training throughput in samples per second over all ranks, the CPU
// time the job spent per sample in the epoch's steps (CPU-ms/sample: each
// rank's process CPU time, user and system, over the epoch's steps, summed
// over the ranks and divided by the samples of all ranks; a figure that
// a machine shared with other work distorts far less than samples/s), and
// the bytes each rank allreduced per step on average (the gradients', or
// with post-local SGD the parameters' when they were averaged), and the
// bytes each rank sent per step by the runtime's own count
// (hvd.Stats.SentBytes: every collective, as its bandwidth-optimal
// algorithm sends it).
//
// The DistributedOptimizer moves the gradients into one flat buffer, in
// backward order (optim.FlatGradients; --flat-gradients=false leaves them
// in the model's own tensors), and reduces them in buckets of up to
// --bucket-bytes (64 KiB by default: here four buckets, fc3 with fc2's
// bias, fc2's weights, fc1's bias, fc1's weights), each a held reduce
// group started as soon as backward has produced its last gradient, so
// communication overlaps the rest of backward; Step waits for what is
// still in flight. Buckets that every rank has ready together and that lie
// back to back in the flat buffer are reduced in one call once the
// runtime's static schedule has locked.
// --groups N reduces the parameters in N groups instead, each started when
// all its members are ready; --groups 1 gives up the overlap. The last
// epoch prints lr 0: the rate decays along a cosine to zero by the end of
// training.
//
// --batchnorm local puts a batch normalisation (optim/nn) between each
// hidden layer and its ReLU, over each rank's own batch; --batchnorm sync
// normalises over the batch of all ranks (SyncBatchNorm), with one small
// allreduce per layer in forward and one in backward, every step (post-local
// SGD's local steps too), on the optimizer's Collectives; the KiB
// allreduced per step include them. Either drops each epoch's short last batch (a batch norm
// cannot train on one row) and evaluates with the running statistics;
// with local, each rank's running statistics are its own (the evaluation
// averages the ranks' accuracies), with sync they are equal on every rank.
// It does not combine with --elastic. The default, none, trains the plain
// MLP.
//
// # Other algorithms and sharded state
//
// --algorithm chooses how the ranks combine their gradients:
// gradient_allreduce (the default), bytegrad (optim.NewByteGrad: each
// bucket's chunks quantized to 8 bits, sent to their owners, averaged and
// gathered, a quarter of the bytes; --error-feedback keeps what the
// quantization lost for the next step) or qadam (optim.NewQAdam: Adam,
// --lr 0.001 unless given, on allreduced gradients for --qadam-warmup
// steps, then 8-bit momenta with the second moment frozen; --qadam-eps is
// Adam's eps, 1e-5 by default because the frozen moment divides the
// momenta's quantization error). --zero 1 or 2 shards SGD's state over
// the ranks (optim.NewZero: each rank updates its range of the flat
// parameters; stage 2 also reduces each gradient to its range's owners
// during backward). They do not combine with each other or with
// --compression, --powersgd-rank, --local-sgd-start, --groups or
// --elastic.
//
//	scripts/mpirun.sh 2 bin/mnist --algorithm bytegrad --error-feedback
//	scripts/mpirun.sh 2 bin/mnist --zero 2
//
// # Post-local SGD
//
// --local-sgd-start N trains the first N steps synchronously, then each
// rank steps on its own gradients, without any gradient allreduce, and the
// ranks average their parameters every --averaging-period K steps
// (optim.PostLocalSGD): the parameters' bytes travel once per K steps
// instead of the gradients' every step. --hierarchical-period K1 also
// averages within each node every K1 steps (K divisible by K1). Each epoch
// ends with an averaging if its last step had none, so that every rank
// evaluates, and ends with, the same model. -1 (the default) keeps
// synchronous SGD throughout; 0 is local SGD from the first step.
//
//	scripts/mpirun.sh 2 bin/mnist --epochs 3 --local-sgd-start 100 --averaging-period 4
//
// # Elastic training
//
// --algorithm picks how the replicas are kept together:
// gradient_allreduce (the default: the DistributedOptimizer and its flags
// above), or one of Bagua's algorithms that exchange weights instead,
// each over a plain SGD with the same schedule: decentralized
// (--peer-selection all or shift_one, --communication-interval,
// --hierarchical), low_precision_decentralized (8-bit weight changes
// around a ring, --communication-interval) and async (background
// averaging every --async-interval-ms). Their epoch lines give the test
// accuracy of the ranks' mean and the bytes this rank sent per step;
// every rank ends with that mean. They take none of --elastic,
// --local-sgd-start, --batchnorm, --compression or --powersgd-rank.
//
// With --elastic the job survives lost workers and follows hosts that are
// added or removed (optim/elastic, Horovod's elastic mode). Launch it
// with gohorovodrun's elastic flags, on the embedded transport:
//
//	gohorovodrun -np 2 --min-np 1 --max-np 4 --host-discovery-script ./discover.sh ./mnist --elastic
//	gohorovodrun -np 4 --min-np 2 -H localhost:2,127.0.0.1:2 ./mnist --elastic
//
// The training set is then dealt by an elastic.Sampler (a permutation per
// epoch, --batch samples per rank and step, shuffled with --seed) instead
// of a fixed share per rank. The model with its optimizer, the sampler's
// position and the progress (epoch, step, the epoch's loss so far) are
// committed in memory every --commit-every steps (10 by default) and at
// the end of each epoch. When a worker dies, the others go back to the
// last commit, the group re-forms at its new size (a new rendezvous round)
// and training resumes from there: the rest of the epoch, from the
// committed position, is dealt over the new size, each sample once. When hosts are added or
// removed, the group re-forms at the next commit, without going back.
// Each step recomputes the learning rate for the size of the moment: the
// schedule of a fixed-size run (warmup, then cosine decay) scaled by the
// current size.
//
// Rank 0 prints the size and the rendezvous round with each epoch
// ("epoch 2: size 2 round 2  loss ..."; the loss is the mean over all the
// epoch's samples, the time and throughput are those since the epoch
// started or the group last resumed), a line at each resume, and at the
// end the time spent in commits and its share of the time in training
// steps. A commit is a snapshot of the state plus a small broadcast from
// rank 0 that agrees on host updates, so it costs more than the snapshot
// alone, which the line also shows. A worker that the re-formed job has no
// place for prints that it was removed and exits with status 0.
//
// --elastic needs an elastic launcher: over MPI, or launched without the
// elastic flags on several ranks, it stops with an error; a process
// started alone trains as one rank.
//
// # Checkpoints
//
// With --checkpoint-dir DIR the job resumes from the newest valid
// checkpoint in DIR, if there is one (rank 0 prints "resumed from step N
// (epoch E)"), and writes one every --checkpoint-every steps (100 by
// default) with optim/checkpoint, in the background; so the same command
// started again after the whole job died (preempted, requeued, killed)
// goes on where it was, and ends with the parameters an uninterrupted run
// ends with, which rank 0 prints as a hash at the end. Training then runs
// the elastic path's loop without elastic.Run: the training set is dealt
// by an elastic.Sampler, and the model with its optimizer, the sampler's
// position and the progress form the state that is written, so a
// checkpoint written at one number of ranks resumes at another, the rest
// of its epoch dealt over the new size. A damaged newest checkpoint is
// reported by name and the one before it is used. With --elastic too,
// every commit whose step is a multiple of --checkpoint-every (a multiple
// of --commit-every) is written, so that the elastic job resumes even
// after losing every worker. --checkpoint-dir does not combine with
// --batchnorm, --powersgd-rank or --local-sgd-start, whose state is not in
// the checkpoint. docs/CHECKPOINTS.md has the details.
//
// With --checkpoint-dir the job also stops cleanly when told to (SIGTERM,
// SIGUSR1, SIGINT: optim/preempt): every rank stops after the same step,
// the checkpoint of that step is written, and the process exits with 99
// (preempted), which gohorovodrun passes on; the same command resumes
// from that step. A second signal, or 25 s without the stop done, ends it
// at once.
//
// Unless GOMAXPROCS is set in the environment, each rank uses its share of
// the machine's cores (the cores divided by the ranks on this host, at least
// one), so that ranks do not oversubscribe the cores with BLAS goroutines.
package main
