#!/usr/bin/env bash
# A real single-node SLURM cluster on this Debian machine, for trying the launcher and for the
# tests (`make slurm-up`, `make slurm-down`; the test suite calls the same script).
#
#   slurm/cluster.sh up      install munge + SLURM if missing, write a config under $DS_SLURM_DIR,
#                            start munged (unless one already answers), slurmctld and slurmd,
#                            wait until the node is idle
#   slurm/cluster.sh down    cancel the cluster's jobs, stop the daemons this script started
#                            (by their pid files, never by name)
#   slurm/cluster.sh status  exit 0 when the cluster answers, print sinfo
#
# Needs root on Debian (apt-get, daemons running as root). Everything it writes goes under
# DS_SLURM_DIR (default /tmp/ds-slurm-<uid>), except the munge key /etc/munge/munge.key
# (created only when missing) and a symlink /etc/slurm/slurm.conf -> the scratch config
# (created only when no /etc/slurm/slurm.conf exists, removed by `down`), so that `sbatch`
# works in any shell. The cluster's settings are in write_config below.
set -euo pipefail

DIR="${DS_SLURM_DIR:-/tmp/ds-slurm-$(id -u)}"
CONF="$DIR/etc/slurm.conf"
SYSTEM_CONF=/etc/slurm/slurm.conf
MUNGE_SOCKET=/run/munge/munge.socket.2
HOST="$(hostname -s)"
UP_TIMEOUT_S="${DS_SLURM_UP_TIMEOUT_S:-60}"

say() { echo "slurm/cluster.sh: $*"; }
die() { echo "slurm/cluster.sh: error: $*" >&2; exit "${2:-1}"; }

alive() {  # alive PIDFILE: the pid in it is a running process
    [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop_pidfile() {  # stop_pidfile NAME PIDFILE: TERM, wait up to 10 s, then KILL
    local name="$1" pidfile="$2" pid
    if ! alive "$pidfile"; then rm -f "$pidfile"; return 0; fi
    pid="$(cat "$pidfile")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        say "$name (pid $pid) ignored TERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    say "stopped $name (pid $pid)"
}

munge_answers() { command -v munge >/dev/null && munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }

cluster_answers() {
    command -v sinfo >/dev/null && SLURM_CONF="$CONF" timeout 5 sinfo -h -o %t >/dev/null 2>&1
}

node_state() { SLURM_CONF="$CONF" timeout 5 sinfo -h -o %t 2>/dev/null | head -1; }

install_packages() {
    local packages=(slurmctld slurmd slurm-client munge)
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null; then
        return 0
    fi
    command -v apt-get >/dev/null || die "SLURM is not installed and there is no apt-get (not Debian); install slurm-wlm and munge by hand" 3
    say "installing ${packages[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # apt-get update only when the package lists do not know the packages yet (a fresh machine).
    if ! apt-get install -y -q --no-install-recommends "${packages[@]}" >"$DIR/apt.log" 2>&1; then
        say "apt-get install failed; running apt-get update first"
        apt-get update -q >>"$DIR/apt.log" 2>&1 || die "apt-get update failed (see $DIR/apt.log)"
        apt-get install -y -q --no-install-recommends "${packages[@]}" >>"$DIR/apt.log" 2>&1 \
            || die "apt-get install ${packages[*]} failed (see $DIR/apt.log)"
    fi
}

start_munge() {
    if munge_answers; then
        say "munged already answers on $MUNGE_SOCKET; using it"
        return 0
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile=/etc/munge/munge.key
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge "$DIR/munge"
    chown munge:munge /run/munge /var/log/munge /var/lib/munge "$DIR/munge"
    chmod 755 /run/munge
    runuser -u munge -- /usr/sbin/munged --force --pid-file="$DIR/munge/munged.pid" \
        --log-file="$DIR/munge/munged.log"
    for _ in $(seq 50); do munge_answers && break; sleep 0.1; done
    munge_answers || die "munged did not start (see $DIR/munge/munged.log)"
    say "started munged (pid $(cat "$DIR/munge/munged.pid"))"
}

write_config() {
    # The node line as slurmd sees this machine (CPUs, sockets, cores, memory), minus UpTime.
    local node
    node="$(slurmd -C | head -1)"
    [[ "$node" == NodeName=* ]] || die "slurmd -C did not describe this node: $node"
    node="${node/NodeName=$(hostname)/NodeName=$HOST}"
    cat >"$CONF" <<EOF
# Written by slurm/cluster.sh for a single-node test cluster.
ClusterName=ds-local
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job is eligible again after cred_expire seconds (default 120).
AuthInfo=cred_expire=10,socket=$MUNGE_SOCKET
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Real preemption: a job in 'high' requeues one in 'debug' (USR2 first, as on a cluster).
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=300
$node State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high Nodes=$HOST Default=NO MaxTime=INFINITE State=UP PriorityTier=10
EOF
}

link_system_conf() {
    if [[ ! -e "$SYSTEM_CONF" && ! -L "$SYSTEM_CONF" ]]; then
        mkdir -p "$(dirname "$SYSTEM_CONF")"
        ln -s "$CONF" "$SYSTEM_CONF"
        touch "$DIR/run/linked-system-conf"
        say "linked $SYSTEM_CONF -> $CONF"
    fi
}

up() {
    [[ "$(id -u)" == 0 ]] || die "needs root (apt-get, daemons); run as root or use a cluster whose sbatch already works" 3
    [[ -f /etc/debian_version ]] || die "needs Debian (apt-get install slurm-wlm munge)" 3
    if alive "$DIR/run/slurmctld.pid" && alive "$DIR/run/slurmd.pid" && cluster_answers; then
        say "already up (config $CONF)"
        return 0
    fi
    mkdir -p "$DIR"/{etc,state,spool,run,log}
    install_packages
    start_munge
    write_config
    # Leftovers of a previous run that was not stopped cleanly: stop ours, start from a clean state.
    stop_pidfile slurmd "$DIR/run/slurmd.pid"
    stop_pidfile slurmctld "$DIR/run/slurmctld.pid"
    slurmctld -c -f "$CONF"   # -c: clear jobs saved by an earlier cluster in $DIR/state
    slurmd -f "$CONF"
    link_system_conf
    local state=""
    for _ in $(seq $((UP_TIMEOUT_S * 5))); do
        state="$(node_state || true)"
        [[ "$state" == idle ]] && break
        sleep 0.2
    done
    if [[ "$state" != idle ]]; then
        die "node $HOST is '${state:-not answering}' after ${UP_TIMEOUT_S} s (see $DIR/log/slurmctld.log and slurmd.log)"
    fi
    say "up: node $HOST idle; config $CONF (export SLURM_CONF=$CONF in shells without $SYSTEM_CONF); logs $DIR/log"
}

down() {
    if alive "$DIR/run/slurmctld.pid"; then
        # Cancel what is still queued or running so no job step outlives the daemons.
        local jobs
        jobs="$(SLURM_CONF="$CONF" timeout 5 squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ' || true)"
        if [[ -n "${jobs// /}" ]]; then
            say "cancelling jobs $jobs"
            # shellcheck disable=SC2086
            SLURM_CONF="$CONF" timeout 10 scancel $jobs 2>/dev/null || true
            for _ in $(seq 50); do
                [[ -z "$(SLURM_CONF="$CONF" timeout 5 squeue -h -o %A -t PD,R,CG,S 2>/dev/null || true)" ]] && break
                sleep 0.2
            done
        fi
    fi
    stop_pidfile slurmd "$DIR/run/slurmd.pid"
    stop_pidfile slurmctld "$DIR/run/slurmctld.pid"
    stop_pidfile munged "$DIR/munge/munged.pid"
    if [[ -f "$DIR/run/linked-system-conf" ]]; then
        if [[ -L "$SYSTEM_CONF" && "$(readlink "$SYSTEM_CONF")" == "$CONF" ]]; then
            rm -f "$SYSTEM_CONF"
            say "removed the link $SYSTEM_CONF"
        fi
        rm -f "$DIR/run/linked-system-conf"
    fi
    say "down (logs kept under $DIR/log)"
}

status() {
    if cluster_answers; then
        SLURM_CONF="$CONF" sinfo
        return 0
    fi
    say "not up (no answer from slurmctld with $CONF)"
    return 1
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: slurm/cluster.sh up|down|status   (state under ${DIR})" >&2; exit 2 ;;
esac
