#!/usr/bin/env bash
# Builds the test binary of every package that has multi-process tests
# (files named *_mpi_test.go) and runs it at each process count in NPS
# (default "2 3 4": 3 is odd, it catches uneven splits), on each transport
# in TRANSPORTS (default "mpi gloo"):
#
#   mpi   built with the "mpi" tag, run under real mpirun: every test of
#         the package at the first process count, and at the others only
#         the tests of its *_mpi_test.go files (the rest run in one process
#         and do not depend on the job: running them again in each of N
#         processes repeated the same test N times per count);
#   gloo  the packages whose multi-process tests also build with the "gloo"
#         tag (runtime, optim: `//go:build (mpi && cgo) || gloo`), built
#         with CGO_ENABLED=0 and run under `gohorovodrun --gloo -np N`,
#         over the embedded transport. Only the multi-process tests run
#         there (GLOO_RUN): the other tests would each try to join the
#         job's rendezvous, which a process joins once.
set -euo pipefail
cd "$(dirname "$0")/.."
nps=${NPS:-2 3 4}
transports=${TRANSPORTS:-mpi gloo}
gloo_run=${GLOO_RUN:-^Test(MPI.*|InitAloneMPIBuild)$}
mkdir -p bin/mpitest

# Node layouts (NODES, default "2x2 3x2": nodes x ranks per node) that make
# this one machine several nodes, for the runtime's hierarchical collectives
# and process sets across nodes (TestMPINodes*, which skip on one node):
# under mpirun each node's ranks get HOROVOD_HOSTNAME=nN, under gohorovodrun
# --gloo the hosts are -H n0.localhost:R,n1.localhost:R,...
nodes=${NODES:-2x2 3x2}
nodes_run=${NODES_RUN:-^TestMPI(Nodes.*|ProcessSet.*|Placement)$}
# optim's tests on those layouts (NODES_RUN_OPTIM): hierarchical model
# averaging and hierarchical decentralized SGD, within each node and across nodes.
nodes_run_optim=${NODES_RUN_OPTIM:-^TestMPI(LocalSGD|Decentralized)Hierarchical$}

# nodes_run_for PKG: the tests PKG runs on the node layouts, or nothing.
nodes_run_for() {
	case $1 in
	"$(go list ./runtime)") echo "$nodes_run" ;;
	"$(go list ./optim)") echo "$nodes_run_optim" ;;
	esac
}

# mpitest_pkgs ENV... -- GO-LIST-FLAGS...: the packages with an
# *_mpi_test.go file in that build.
mpitest_pkgs() {
	env "$@" go list -f '{{.ImportPath}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./... |
		awk '/_mpi_test\.go/{print $1}'
}

# mpi_tests PKG: a -test.run pattern for the tests defined in PKG's
# *_mpi_test.go files (TestMain aside), or nothing if there are none.
mpi_tests() {
	go list -tags mpi -f '{{$d := .Dir}}{{range .TestGoFiles}}{{$d}}/{{.}}
{{end}}{{range .XTestGoFiles}}{{$d}}/{{.}}
{{end}}' "$1" | grep '_mpi_test\.go$' | xargs -r sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' |
		sort -u | paste -sd'|' | sed 's/.\+/^(&)$/'
}

# run_np TRANSPORT PKG NP COMMAND...: runs one job, timed.
run_np() {
	local transport=$1 pkg=$2 np=$3 start
	shift 3
	echo "=== $transport -np $np $pkg"
	start=$(date +%s)
	if ! timeout 600 "$@"; then
		echo "FAIL: $pkg under $transport -np $np" >&2
		exit 1
	fi
	echo "ok   $pkg $transport np=$np ($(($(date +%s) - start))s)"
}

for transport in $transports; do
	case $transport in
	mpi)
		pkgs=$(mpitest_pkgs GOFLAGS=-tags=mpi)
		for pkg in $pkgs; do
			bin=bin/mpitest/$(echo "$pkg" | tr '/' '_').test
			go test -tags mpi -c -o "$bin" "$pkg"
			only=() first=1
			for np in $nps; do
				run_np mpirun "$pkg" "$np" scripts/mpirun.sh "$np" "$bin" -test.timeout 300s "${only[@]}" ${MPITEST_FLAGS:-}
				if [ $first = 1 ]; then
					first=0 run=$(mpi_tests "$pkg")
					[ -n "$run" ] && only=(-test.run "$run")
				fi
			done
			run=$(nodes_run_for "$pkg")
			if [ -n "$run" ]; then
				for layout in $nodes; do
					n=${layout%x*} per=${layout#*x} apps=()
					for ((k = 0; k < n; k++)); do
						[ $k -gt 0 ] && apps+=(:)
						apps+=(-np "$per" env HOROVOD_HOSTNAME=n$k "$bin" -test.run "$run" -test.timeout 300s)
					done
					run_np "mpirun nodes $layout" "$pkg" $((n * per)) scripts/mpirun.sh "${apps[@]:1}"
				done
			fi
		done
		;;
	gloo)
		pkgs=$(mpitest_pkgs CGO_ENABLED=0 GOFLAGS=-tags=gloo)
		[ -n "$pkgs" ] && CGO_ENABLED=0 go build -o bin/mpitest/gohorovodrun ./cmd/gohorovodrun
		for pkg in $pkgs; do
			bin=bin/mpitest/gloo_$(echo "$pkg" | tr '/' '_').test
			CGO_ENABLED=0 go test -tags gloo -c -o "$bin" "$pkg"
			for np in $nps; do
				run_np "gohorovodrun --gloo" "$pkg" "$np" bin/mpitest/gohorovodrun --gloo -np "$np" \
					"$bin" -test.run "$gloo_run" -test.timeout 300s ${MPITEST_FLAGS:-}
			done
			run=$(nodes_run_for "$pkg")
			if [ -n "$run" ]; then
				for layout in $nodes; do
					n=${layout%x*} per=${layout#*x} hosts=""
					for ((k = 0; k < n; k++)); do hosts+=${hosts:+,}n$k.localhost:$per; done
					run_np "gohorovodrun --gloo nodes $layout" "$pkg" $((n * per)) bin/mpitest/gohorovodrun --gloo \
						-np $((n * per)) -H "$hosts" "$bin" -test.run "$run" -test.timeout 300s
				done
			fi
		done
		;;
	*)
		echo "mpitest: unknown transport $transport (mpi, gloo)" >&2
		exit 2
		;;
	esac
	if [ -z "$pkgs" ]; then
		echo "mpitest: no multi-process tests found for $transport"
	fi
done
