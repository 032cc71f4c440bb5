#!/usr/bin/env bash
# scripts/slurm.sh: a one-node SLURM cluster on this machine, for the
# SLURM end-to-end tests (internal/launch/slurm_e2e_test.go).
#
#   bash scripts/slurm.sh up     install Debian's slurm and munge packages if
#                                missing, write /etc/slurm/slurm.conf and start
#                                munged, slurmctld and slurmd (idempotent: a
#                                cluster that already answers is left alone)
#   bash scripts/slurm.sh down   stop the daemons
#   bash scripts/slurm.sh stop   stop only what `up` started (make test runs it
#                                at the end, so that it leaves no daemon behind;
#                                a cluster that was already up stays up)
#   bash scripts/slurm.sh status exit 0 when the cluster answers and its node is idle
#
# No systemd is needed: proctrack/linuxproc and task/none, munged started
# as the munge user, every daemon as a plain background process. The node
# is declared with more CPUs than the machine has (SlurmdParameters=
# config_overrides), so jobs may ask for more tasks than there are cores, as
# the oversubscribed mpirun tests do. It must run as root.
set -euo pipefail

CPUS=${GOHOROVOD_SLURM_CPUS:-8}
STATE=/var/lib/gohorovod-slurm
CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s)

die() { echo "slurm.sh: $*" >&2; exit 1; }

install() {
	if command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
		command -v srun >/dev/null && command -v munged >/dev/null; then
		return
	fi
	[ "$(id -u)" = 0 ] || die "the slurm packages are missing and installing them needs root"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

answers() {
	timeout 5 sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'
}

up() {
	[ "$(id -u)" = 0 ] || die "bringing up the test cluster needs root"
	install
	if answers; then
		return
	fi
	down >/dev/null 2>&1 || true
	mkdir -p "$STATE/ctld" "$STATE/d" /etc/slurm /run/munge /var/log/munge /var/lib/munge
	if [ ! -s /etc/munge/munge.key ]; then
		dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
	fi
	chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
	chmod 0700 /etc/munge
	chmod 0400 /etc/munge/munge.key
	cat >"$CONF" <<CONF
# Written by gohorovod's scripts/slurm.sh: a one-node test cluster.
ClusterName=gohorovod
SlurmctldHost=$NODE
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=5
MinJobAge=60
InactiveLimit=0
NodeName=$NODE CPUs=$CPUS State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
	if ! pgrep -x munged >/dev/null; then
		runuser -u munge -- /usr/sbin/munged
		touch "$STATE/started-munged"
	fi
	touch "$STATE/started"
	/usr/sbin/slurmctld
	/usr/sbin/slurmd
	for _ in $(seq 1 100); do
		if answers; then
			return
		fi
		scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
		sleep 0.2
	done
	echo "slurm.sh: the cluster did not come up; its logs:" >&2
	tail -n 20 "$STATE/slurmctld.log" "$STATE/slurmd.log" >&2 || true
	exit 1
}

down() {
	for d in slurmd slurmctld; do
		pkill -x "$d" 2>/dev/null || true
	done
	for _ in $(seq 1 50); do
		pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || return 0
		sleep 0.1
	done
	pkill -9 -x slurmd 2>/dev/null || true
	pkill -9 -x slurmctld 2>/dev/null || true
}

# stop undoes what up started, and nothing else.
stop() {
	if [ -f "$STATE/started" ]; then
		down
		rm -f "$STATE/started"
	fi
	if [ -f "$STATE/started-munged" ]; then
		pkill -x munged 2>/dev/null || true
		rm -f "$STATE/started-munged"
	fi
}

case "${1:-up}" in
up) up ;;
down) down ;;
stop) stop ;;
status) answers ;;
*) die "usage: $0 up|down|stop|status" ;;
esac
