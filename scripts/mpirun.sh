#!/usr/bin/env bash
# mpirun with the settings gohorovod's tests and demos use on one machine:
# run as root if need be, oversubscribe small machines, do not bind ranks to
# cores (Go wants all of them), shared-memory transport.
#
# Open MPI's single-copy mechanism between the ranks (cross-memory attach,
# CMA) follows GOHOROVOD_MPI_SINGLE_COPY, as the launcher's
# --mpi-single-copy does: none (the default: copy in and out through shared
# memory, the faster where measured, and safe where a container forbids
# process_vm_readv), auto (CMA where the launcher's probe finds it works,
# else none with a note) or cma (CMA, refused with the probe's reason where
# it does not work). The probe is the launcher's (GOHOROVODRUN, default
# bin/gohorovodrun beside this script's repository).
# Usage: scripts/mpirun.sh NP PROGRAM [ARGS...]
set -euo pipefail
np=$1
shift
mode=${GOHOROVOD_MPI_SINGLE_COPY:-none}
mech=none
case $mode in
none) ;;
cma | auto)
	launcher=${GOHOROVODRUN:-$(dirname "$0")/../bin/gohorovodrun}
	if [ ! -x "$launcher" ]; then
		if [ "$mode" = cma ]; then
			echo "mpirun.sh: GOHOROVOD_MPI_SINGLE_COPY=cma: no launcher at $launcher to probe with (build it: go build -tags mpi -o bin/ ./cmd/gohorovodrun, or set GOHOROVODRUN)" >&2
			exit 2
		fi
		echo "mpirun.sh: GOHOROVOD_MPI_SINGLE_COPY=auto: no launcher at $launcher to probe with: copying through shared memory" >&2
	else
		# The launcher probes and prints the mpirun command it would run.
		if ! out=$("$launcher" -np 1 --mpi-single-copy "$mode" --dry-run true 2>&1); then
			echo "mpirun.sh: GOHOROVOD_MPI_SINGLE_COPY=$mode: $out" >&2
			exit 2
		fi
		if grep -q -- 'btl_vader_single_copy_mechanism cma' <<<"$out"; then
			mech=cma
		else
			grep -v '^/' <<<"$out" >&2 || true # the probe's note
		fi
	fi
	;;
*)
	echo "mpirun.sh: GOHOROVOD_MPI_SINGLE_COPY=$mode: want none, cma or auto" >&2
	exit 2
	;;
esac
flags=(--oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism "$mech")
if [ "$(id -u)" -eq 0 ]; then
	flags+=(--allow-run-as-root)
fi
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=17179869184}
exec mpirun "${flags[@]}" -np "$np" "$@"
