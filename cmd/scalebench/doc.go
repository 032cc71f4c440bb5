// Command scalebench measures how a data-parallel training job scales on
// this machine: it runs a training program (examples/mnist by default)
// under a launcher at np 1, 2, 4, ... up to the number of cores, and, for
// each np, the bound: np independent single-rank copies of the same
// program running at once, whose samples/s are summed (what np ranks
// could reach if communication cost nothing and they only shared the
// machine). Every process of both, job and bound, runs at the same cores
// per rank: scalebench sets GOMAXPROCS to the cores over np (at least 1).
// Each np's job and bound run -rounds times (default 3), interleaved and
// alternating which goes first, and the table and plot take the medians. It prints samples/s, the bound, the ideal (np times one
// rank's) and the efficiency against each, and draws them in a PNG.
//
//	go build -tags mpi -o bin/ ./examples/mnist ./cmd/scalebench
//	bin/scalebench -program bin/mnist -max-np 8 -png scaling.png -- --epochs 2 --train-limit 30000
//
// The throughput of a run is the last epoch's "samples/s" figure that the
// program prints (the first epoch pays for start-up), or the
// samples_per_s_total that examples/synthetic prints.
//
// Where the program prints it (examples/mnist does), the table also gives
// the job's CPU per sample over that epoch, every rank's CPU time summed
// ("CPU-ms/sample", the median over rounds), the bound's (the mean of its
// single-rank copies'), and the job's ratio against the bound's of the same
// round, the median over rounds ("CPU vs bound"): against single-rank jobs
// at the job's cores per rank, since a single-rank job given every core (np
// 1's) also spends CPU on parallel kernels and idle scheduler threads. CPU
// time is what the runtime takes from compute, and a machine shared with
// other work distorts it less than samples/s (though a rank that spins
// while it waits spends more CPU the longer the machine keeps its peer
// away).
// After the table, one line per np gives that ratio for scripts:
//
//	np=2 cpu_per_sample_ratio=1.04
//
// -variant compares settings of the job against the same bound: each
// -variant "VAR=VALUE ..." is a job run in every round beside the bound, in
// a rotated order, with those variables added to its environment, and gets
// a table and ratio lines of its own, labelled with its settings:
//
//	bin/scalebench -program bin/mnist -max-np 2 -rounds 5 -png= \
//	    -variant GOHOROVOD_STATIC_SCHEDULE=0 -variant GOHOROVOD_STATIC_SCHEDULE=3 -- --epochs 2
//
// A variant's SCALEBENCH_PROGRAM=PATH runs its job with another program,
// to compare two builds beside one bound (which runs -program):
//
//	bin/scalebench -program bin/mnist -max-np 2 -rounds 5 -png= \
//	    -variant SCALEBENCH_PROGRAM=old/mnist -variant SCALEBENCH_PROGRAM=bin/mnist -- --epochs 2
//
// -min-np starts the doubling above 1, to measure only the large np of a
// big machine (bin/scalebench -min-np 8 -max-np 8); the ideal, which is np
// times the single-rank job's throughput, is then not known and reads "-".
//
// With -sweep it checks autotuning instead: at -np ranks it runs the
// defaults, every fusion threshold by cycle time pair of -fusion and
// -cycle (set through HOROVOD_FUSION_THRESHOLD and HOROVOD_CYCLE_TIME),
// and a run with HOROVOD_AUTOTUNE=1, -rounds times in a rotated order, and
// prints each setting's median samples/s, its ratio to the best fixed
// setting, and the autotuned run against the best fixed setting and the
// defaults. The autotuned run's figure must come from steps run after the
// tuner had finished (mnist's last epoch must not be marked
// "(autotuning)"; synthetic warms up until tuning ends), else the sweep
// stops with an error. At Horovod's defaults tuning takes about 1,550
// training steps; HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE and the other autotune
// variables in scalebench's environment shorten it.
//
//	HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=1 bin/scalebench -sweep -np 2 -program bin/mnist -- --epochs 4
//	bin/scalebench -sweep -np 2 -program bin/synthetic -fusion 1,4,16,64 -cycle 1,5,25 -- --model resnet50
package main
