#!/usr/bin/env bash
# Flat against hierarchical allreduce at np 4 laid out as 2 nodes x 2 ranks
# on this one machine (the figures in docs/BENCHMARKS.md): cmd/hvdbench's worker, ROUNDS
# interleaved rounds (flat then hierarchical, each round) under mpirun (each
# pair of ranks names its node with HOROVOD_HOSTNAME) and under
# gohorovodrun --gloo (-H a.localhost:2,b.localhost:2), then the median
# time of each over the rounds and the ratio hierarchical/flat.
# Usage: [ROUNDS=3] [CASES=resnet50,64MiB] [BENCH_DIR=examples/synthetic/shapes] scripts/hierbench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
cases=${CASES:-resnet50,64MiB}
bench_dir=${BENCH_DIR:-examples/synthetic/shapes}
mkdir -p bin
go build -tags mpi -o bin/hvdbench ./cmd/hvdbench
CGO_ENABLED=0 go build -o bin/hvdbench-gloo ./cmd/hvdbench
CGO_ENABLED=0 go build -o bin/gohorovodrun ./cmd/gohorovodrun
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 0; i < rounds; i++)); do
	for h in false true; do
		w=(-worker -hierarchical=$h -cases "$cases" -bench-dir "$bench_dir")
		scripts/mpirun.sh 2 env HOROVOD_HOSTNAME=a bin/hvdbench "${w[@]}" : -np 2 env HOROVOD_HOSTNAME=b bin/hvdbench "${w[@]}" |
			grep '^impl=runtime' | tee -a "$out"
		bin/gohorovodrun --gloo -np 4 -H a.localhost:2,b.localhost:2 bin/hvdbench-gloo "${w[@]}" |
			sed -n 's/^.*\(impl=runtime\)/\1/p' | tee -a "$out"
	done
done
# Medians over the rounds, per transport and case, and the ratio.
awk '{
	for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
	k = f["transport"] " " f["case"]; n[k, f["hierarchical"]]++
	v[k, f["hierarchical"], n[k, f["hierarchical"]]] = f["median_ms"]; keys[k] = 1
}
function median(k, h,    m, i, j, t, a) {
	m = n[k, h]
	for (i = 1; i <= m; i++) a[i] = v[k, h, i]
	for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
	for (k in keys) {
		fl = median(k, "false"); hi = median(k, "true")
		printf "summary transport=%s case=%s rounds=%d flat_median_ms=%.1f hier_median_ms=%.1f hier_over_flat=%.2f\n",
			substr(k, 1, index(k, " ") - 1), substr(k, index(k, " ") + 1), n[k, "false"], fl, hi, hi / fl
	}
}' "$out" | sort
