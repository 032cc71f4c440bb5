#!/usr/bin/env bash
# Builds the test binary of every package that has multi-process tests
# (files named *_mpi_test.go, build tag "mpi") and runs it under real mpirun
# at each process count in NPS (default "2 3 4": 3 is odd, it catches
# uneven splits).
set -euo pipefail
cd "$(dirname "$0")/.."
nps=${NPS:-2 3 4}
mkdir -p bin/mpitest
pkgs=$(go list -tags mpi -f '{{.ImportPath}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./... | awk '/_mpi_test\.go/{print $1}')
if [ -z "$pkgs" ]; then
	echo "mpitest: no multi-process tests found"
	exit 0
fi
for pkg in $pkgs; do
	bin=bin/mpitest/$(echo "$pkg" | tr '/' '_').test
	go test -tags mpi -c -o "$bin" "$pkg"
	for np in $nps; do
		echo "=== mpirun -np $np $pkg"
		start=$(date +%s)
		if ! timeout 600 scripts/mpirun.sh "$np" "$bin" -test.timeout 300s ${MPITEST_FLAGS:-}; then
			echo "FAIL: $pkg under mpirun -np $np" >&2
			exit 1
		fi
		echo "ok   $pkg np=$np ($(( $(date +%s) - start ))s)"
	done
done
