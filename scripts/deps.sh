#!/usr/bin/env bash
# Installs what gohorovod needs to build and test with MPI: Open MPI (mpirun,
# mpicc, headers) and pkg-config. Does nothing when they are already there.
set -euo pipefail
need=()
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || need+=(libopenmpi-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
cmd="apt-get update && apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev pkg-config gcc"
if [ "$(id -u)" -ne 0 ]; then
	echo "gohorovod needs Open MPI and pkg-config (missing: ${need[*]})." >&2
	echo "Install them as root, then run make again:" >&2
	echo "    sudo sh -c '$cmd'" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "gohorovod needs Open MPI (or MPICH) and pkg-config (missing: ${need[*]}); this machine has no apt-get: install them with its package manager." >&2
	exit 1
fi
echo "installing ${need[*]} through apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev pkg-config gcc >/dev/null
