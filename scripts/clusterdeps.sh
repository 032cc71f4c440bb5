#!/usr/bin/env bash
# Installs and starts what the cluster tests need (make test runs it):
# Debian's python3-torch (torchrun and torch's TCPStore, for the torchrun
# tests) and a one-node SLURM cluster (scripts/slurm.sh up). As root with
# apt-get only; elsewhere it says what is missing, and those tests skip
# with the same reason.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "clusterdeps: not root with apt-get: the SLURM and torchrun tests will skip" >&2
	exit 0
fi
if ! /usr/bin/python3 -c 'import torch.distributed.run' >/dev/null 2>&1; then
	echo "installing python3-torch through apt-get (torchrun, for the torchrun tests)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends python3-torch >/dev/null
fi
bash scripts/slurm.sh up
