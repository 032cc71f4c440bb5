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

# On a fresh cloud machine another apt-get (cloud-init, unattended-upgrades)
# often holds apt's and dpkg's locks for the first minutes: wait for it
# rather than fail, up to DEPS_LOCK_TIMEOUT seconds (default 600), saying
# which process we wait for. apt-get's own DPkg::Lock::Timeout covers the
# race between this check and its start.
lock_timeout=${DEPS_LOCK_TIMEOUT:-600}
locks=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)

# lock_holders prints "PID (command line)" for each process that has one of
# the lock files open.
lock_holders() {
	local fd target pid lock
	for fd in /proc/[0-9]*/fd/*; do
		target=$(readlink "$fd" 2>/dev/null) || continue
		for lock in "${locks[@]}"; do
			if [ "$target" = "$lock" ]; then
				pid=${fd#/proc/}
				pid=${pid%%/*}
				echo "$pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-100))"
			fi
		done
	done | sort -u
}

# wait_for_apt returns once no process holds apt's or dpkg's locks, or
# after lock_timeout seconds (apt-get then waits on its own, and fails
# with its own message if the lock is still held).
wait_for_apt() {
	local waited=0 holders
	while holders=$(lock_holders) && [ -n "$holders" ]; do
		if [ "$waited" -eq 0 ]; then
			echo "waiting up to ${lock_timeout} s for apt's lock, held by:" >&2
			echo "$holders" | sed 's/^/    /' >&2
		fi
		if [ "$waited" -ge "$lock_timeout" ]; then
			echo "still held after ${lock_timeout} s; trying anyway" >&2
			return 0
		fi
		sleep 2
		waited=$((waited + 2))
	done
	if [ "$waited" -gt 0 ]; then
		echo "apt's lock released after ${waited} s" >&2
	fi
}

apt=(apt-get -o "DPkg::Lock::Timeout=${lock_timeout}")
echo "installing ${need[*]} through apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
wait_for_apt
"${apt[@]}" update -qq
wait_for_apt
"${apt[@]}" install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev pkg-config gcc >/dev/null
