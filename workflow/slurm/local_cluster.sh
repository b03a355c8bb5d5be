#!/usr/bin/env bash
# A real single-node SLURM on this machine, from Debian's packages, for the pipeline's slurm
# profile (workflow/profiles/slurm) and its test (tests/workflow/test_slurm_cluster.py).
#
#   sudo workflow/slurm/local_cluster.sh up       # install (apt) if missing, configure, start
#   sudo workflow/slurm/local_cluster.sh status   # sinfo, the account association, the daemons
#   sudo workflow/slurm/local_cluster.sh down     # stop every daemon this script started
#
# What it sets up (docs/cluster.md): munged (authentication), a private MariaDB on
# 127.0.0.1:$AKVC_SLURM_DB_PORT (datadir under $AKVC_SLURM_DIR, not the system's /var/lib/mysql)
# for slurmdbd, so `sacct` (the executor plugin's status query) answers; slurmdbd, slurmctld
# and slurmd on loopback; one node sized by `slurmd -C` (all CPUs, memory minus a reserve);
# cluster `akvc`, partition `akvc` (the default), account `akvc` with the calling user (and
# root) in it. CPUs and memory are consumable (select/cons_tres, CR_Core_Memory), so small
# jobs share the node as on a real cluster. Process tracking is plain /proc (no cgroups: they
# are often unavailable in containers and sandboxes).
#
# The config goes where SLURM's tools look by default (/etc/slurm/slurm.conf), so sbatch,
# sacct and the plugin need no SLURM_CONF. A slurm.conf not written by this script is never
# overwritten. Daemons are stopped by the pids they wrote, nothing else.
set -euo pipefail

STATE=${AKVC_SLURM_DIR:-/var/lib/akvc-slurm}
ETC=/etc/slurm
CLUSTER=${AKVC_SLURM_CLUSTER:-akvc}
ACCOUNT=${AKVC_SLURM_ACCOUNT:-akvc}
PARTITION=${AKVC_SLURM_PARTITION:-akvc}
DB_PORT=${AKVC_SLURM_DB_PORT:-3307}
# Memory kept back from SLURM for the OS and the submitting Snakemake (MB).
MEM_RESERVE_MB=${AKVC_SLURM_MEM_RESERVE_MB:-2048}
MARK="# written by agentic_kvc workflow/slurm/local_cluster.sh"
PACKAGES=(slurm-wlm slurmdbd mariadb-server munge)
DB_PASS_FILE=$STATE/db_password
SOCK=$STATE/mysql/mysqld.sock

log() { echo "local_cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() {
	[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts system daemons)"
}

install_packages() {
	local missing=()
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} = 0 ] && return 0
	command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} yourself"
	log "apt-get install ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Refuse to overwrite a SLURM config someone else wrote.
check_ours() {
	local f=$1
	if [ -e "$f" ] && ! grep -qF "$MARK" "$f"; then
		die "$f exists and was not written by this script; move it away or use that cluster"
	fi
}

write_config() {
	check_ours "$ETC/slurm.conf"
	check_ours "$ETC/slurmdbd.conf"
	mkdir -p "$ETC" "$STATE"/{ctld,d,log,run}
	local host node_line cpus mem
	host=$(hostname -s)
	# `slurmd -C`: this machine's CPUs, sockets, cores, threads and memory, as slurmd sees them.
	node_line=$(slurmd -C | head -1)
	cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")
	mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
	mem=$((mem > MEM_RESERVE_MB * 2 ? mem - MEM_RESERVE_MB : mem / 2))
	node_line=$(sed "s/RealMemory=[0-9]*/RealMemory=$mem/" <<<"$node_line")
	cat >"$ETC/slurm.conf" <<EOF
$MARK
# One node ($host, $cpus CPUs, $mem MB for jobs) on loopback; \`local_cluster.sh down\` stops it.
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Finished jobs stay in squeue for 5 min; sacct (slurmdbd) keeps them for good.
MinJobAge=300
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
AccountingStorageEnforce=associations
JobCompType=jobcomp/none
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
	[ -s "$DB_PASS_FILE" ] || { head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$DB_PASS_FILE"; chmod 600 "$DB_PASS_FILE"; }
	cat >"$ETC/slurmdbd.conf" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$DB_PASS_FILE")
StorageLoc=slurm_acct_db
EOF
	chmod 600 "$ETC/slurmdbd.conf"
	log "wrote $ETC/slurm.conf ($node_line) and $ETC/slurmdbd.conf"
}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
	local t=$1 what=$2
	shift 2
	for _ in $(seq "$((t * 4))"); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.25
	done
	die "$what did not come up within ${t}s (logs: $STATE/log)"
}

start_munge() {
	if alive "$STATE/run/munged.pid"; then return 0; fi
	[ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
		|| /usr/sbin/create-munge-key -f; }
	chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
	mkdir -p /run/munge && chown munge:munge /run/munge
	chown munge:munge "$STATE/run" 2>/dev/null || true
	local pid=$STATE/run/munged.pid
	touch "$STATE/log/munged.log" && chown munge:munge "$STATE/log/munged.log"
	runuser -u munge -- /usr/sbin/munged --pid-file="$pid" --log-file="$STATE/log/munged.log"
	chown root:root "$STATE/run"
	chmod 755 "$STATE/run"
	wait_for 10 munged sh -c 'munge -n | unmunge'
}

db() { mariadb --protocol=socket --socket="$SOCK" -uroot "$@"; }

start_db() {
	local dir=$STATE/mysql
	if ! alive "$dir/mariadbd.pid"; then
		if [ ! -d "$dir/data/mysql" ]; then
			mkdir -p "$dir/data" && chown -R mysql:mysql "$dir"
			mariadb-install-db --user=mysql --datadir="$dir/data" --skip-test-db \
				--auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1
		fi
		chown mysql:mysql "$dir"
		# innodb settings from SLURM's accounting guide (slurm.schedmd.com/accounting.html).
		/usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$dir/data" --socket="$SOCK" \
			--pid-file="$dir/mariadbd.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
			--innodb-buffer-pool-size=128M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
			--log-error="$STATE/log/mariadb.log" >/dev/null 2>&1 &
		wait_for 60 mariadbd db -e 'select 1'
	fi
	local pass
	pass=$(cat "$DB_PASS_FILE")
	db -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
		CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
		CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
		ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
		ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$pass';
		GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
		GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
}

# The users whose jobs may run: root and whoever called sudo (the plugin checks the account
# against `sacctmgr list user $USER`).
users() {
	echo root
	[ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ] && echo "$SUDO_USER"
	true
}

start_slurm() {
	if ! alive "$STATE/run/slurmdbd.pid"; then
		/usr/sbin/slurmdbd
		wait_for 60 slurmdbd sacctmgr -n list cluster
	fi
	sacctmgr -n list cluster format=cluster | grep -qw "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
	sacctmgr -n list account format=account | grep -qw "$ACCOUNT" \
		|| sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description=agentic_kvc Organization=local >/dev/null
	for u in $(users); do
		sacctmgr -n list assoc user="$u" account="$ACCOUNT" format=user | grep -qw "$u" \
			|| sacctmgr -i add user "$u" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" >/dev/null
	done
	if ! alive "$STATE/run/slurmctld.pid"; then /usr/sbin/slurmctld; fi
	wait_for 60 slurmctld scontrol ping
	if ! alive "$STATE/run/slurmd.pid"; then /usr/sbin/slurmd; fi
	# The node is usable once sinfo reports it idle (or mixed/allocated, when jobs already run).
	wait_for 60 "node $(hostname -s)" sh -c "sinfo -h -N -o %t | grep -qE '^(idle|mix|alloc)'"
}

status() {
	for d in munged slurmdbd slurmctld slurmd; do
		if alive "$STATE/run/$d.pid"; then echo "$d: running (pid $(cat "$STATE/run/$d.pid"))"
		else echo "$d: stopped"; fi
	done
	if alive "$STATE/mysql/mariadbd.pid"; then echo "mariadbd: running (pid $(cat "$STATE/mysql/mariadbd.pid"))"
	else echo "mariadbd: stopped"; fi
	sinfo -N -o "%N %P %c %m %t" 2>/dev/null || true
	sacctmgr -n list assoc format=cluster,account,user 2>/dev/null || true
}

stop_pid() {  # stop_pid NAME PIDFILE: TERM, then wait up to 20 s for it to go
	local name=$1 pidf=$2 pid
	alive "$pidf" || return 0
	pid=$(cat "$pidf")
	kill "$pid"
	for _ in $(seq 80); do kill -0 "$pid" 2>/dev/null || { rm -f "$pidf"; return 0; }; sleep 0.25; done
	log "$name (pid $pid) did not stop in 20 s; sending KILL"
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$pidf"
}

down() {
	stop_pid slurmd "$STATE/run/slurmd.pid"
	stop_pid slurmctld "$STATE/run/slurmctld.pid"
	stop_pid slurmdbd "$STATE/run/slurmdbd.pid"
	stop_pid mariadbd "$STATE/mysql/mariadbd.pid"
	stop_pid munged "$STATE/run/munged.pid"
	log "stopped"
}

case "${1:-}" in
install) need_root; install_packages ;;
up)
	need_root
	install_packages
	write_config
	start_munge
	start_db
	start_slurm
	log "up: cluster $CLUSTER, partition $PARTITION, account $ACCOUNT ($(sinfo -h -o '%c CPUs, %m MB'))"
	;;
status) status ;;
down) need_root; down ;;
purge)  # down, then remove the state (database included) and the config files this script wrote
	need_root
	down
	for f in "$ETC/slurm.conf" "$ETC/slurmdbd.conf"; do
		[ -e "$f" ] && grep -qF "$MARK" "$f" && rm -f "$f"
	done
	rm -rf "$STATE"
	;;
*)
	echo "usage: $0 up|status|down|purge|install" >&2
	exit 2
	;;
esac
