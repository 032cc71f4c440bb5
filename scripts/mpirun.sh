#!/usr/bin/env bash
# mpirun with the settings gohorovod's tests and demos use on one machine:
# run as root if need be, oversubscribe small machines, do not bind ranks to
# cores (Go wants all of them), shared-memory transport without the
# cross-process copy that some containers forbid.
# Usage: scripts/mpirun.sh NP PROGRAM [ARGS...]
set -euo pipefail
np=$1
shift
flags=(--oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
if [ "$(id -u)" -eq 0 ]; then
	flags+=(--allow-run-as-root)
fi
export GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=17179869184}
exec mpirun "${flags[@]}" -np "$np" "$@"
