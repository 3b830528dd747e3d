#!/usr/bin/env bash
# A throw-away single-node Slurm on this machine (as root), to try `srun` and run tests/test_slurm.py.
#
#   slurm/local_slurm.sh start    install Debian's slurm-wlm and munge with apt if missing, start munged,
#                                 slurmctld and slurmd from a private state directory, wait until the
#                                 node is idle; then use it with  export SLURM_CONF=<state>/slurm.conf
#   slurm/local_slurm.sh stop     cancel its jobs, stop exactly the daemons `start` recorded, delete the state
#   slurm/local_slurm.sh status   the recorded daemons and whether they are alive
#
#   eval "$(slurm/local_slurm.sh start)" && srun -n 4 --mpi=pmi2 .venv/bin/python main.py sync
#
# Nothing outside the state directory is touched except by apt (which runs with a policy-rc.d that
# keeps the packages from starting system daemons of their own). No systemd and no cgroups are needed:
# processes are tracked through /proc (proctrack/linuxproc), tasks are not bound (task/none), and the
# node declares $LOCAL_SLURM_CPUS CPUs whatever it has (config_overrides), shared between jobs
# (OverSubscribe=FORCE), so `srun -n 4` runs on a 2-core machine.
#
# Settings (environment):
#   LOCAL_SLURM_DIR       config, munge key and socket, logs, PIDs  [${TMPDIR:-/tmp}/mnist-mpi-slurm]
#   LOCAL_SLURM_PORT      slurmctld port; slurmd uses the next one (not Slurm's own 6817, 6818)  [16817]
#   LOCAL_SLURM_CPUS      CPUs the node declares  [16]
#   LOCAL_SLURM_WAIT      seconds to wait for the node to become idle  [60]
#   LOCAL_SLURM_APT_WAIT  seconds allowed for installing the packages  [300]
#
# Exit status of start: 0 running; 77 this machine cannot run it (not root, no apt-get, the install
# failed, a port is taken), so callers skip; 1 anything else (a daemon failed: a bug), so callers fail.
set -euo pipefail

STATE=${LOCAL_SLURM_DIR:-${TMPDIR:-/tmp}/mnist-mpi-slurm}
CTLD_PORT=${LOCAL_SLURM_PORT:-16817}
SLURMD_PORT=$((CTLD_PORT + 1))
CPUS=${LOCAL_SLURM_CPUS:-16}
WAIT=${LOCAL_SLURM_WAIT:-60}
APT_WAIT=${LOCAL_SLURM_APT_WAIT:-300}
NODE=localnode
PARTITION=local
CONF=$STATE/slurm.conf
SOCKET=$STATE/munge/munge.socket
MARKER=$STATE/.local_slurm        # only a directory holding this file is ever deleted
DAEMONS=(munged slurmctld slurmd)
SKIP=77

say() { echo "local_slurm: $*" >&2; }
cannot_run() { say "cannot run here: $*"; exit "$SKIP"; }
fail() {
    say "error: $*"
    show_logs
    stop # start leaves either a working Slurm or nothing
    exit 1
}

show_logs() {
    local log
    for log in "$STATE"/log/*; do
        [[ -f $log ]] || continue
        echo "---- last lines of $log" >&2
        tail -n 15 "$log" >&2
    done
}

# ---------------------------------------------------------------- install

missing_commands() {
    local command
    for command in munged mungekey munge slurmctld slurmd srun sinfo squeue scancel; do
        command -v "$command" >/dev/null || echo "$command"
    done
}

apt_get() {
    # Within the install's time budget: without a network apt would retry for minutes. --foreground
    # keeps apt-get in our process group, so that a caller's timeout that ends the group ends it too.
    local left=$((apt_deadline - SECONDS))
    ((left > 0)) || return 1
    DEBIAN_FRONTEND=noninteractive timeout --foreground "$left" apt-get -q -o Acquire::Retries=1 \
        -o Acquire::http::Timeout=20 -o DPkg::Lock::Timeout=60 "$@"
}

install_packages() {
    [[ -z $(missing_commands) ]] && return 0
    command -v apt-get >/dev/null || cannot_run "Slurm is not installed and there is no apt-get"
    say "installing slurm-wlm and munge with apt-get (missing: $(missing_commands | xargs))"
    apt_deadline=$((SECONDS + APT_WAIT))
    # Packages must not start system-wide daemons of their own (we start ours by hand): a
    # policy-rc.d that forbids it, for the duration of the install, unless one is already there.
    local policy=/usr/sbin/policy-rc.d made_policy=""
    if [[ ! -e $policy ]]; then
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
        trap 'exit 143' TERM INT HUP # so that the EXIT trap runs on a timeout too
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made_policy=yes
    fi
    local log
    log=$(mktemp)
    # Without man pages: rebuilding the man-db index for them took 40 of the 70 s of the install.
    local install=(install -y --no-install-recommends -o "DPkg::Options::=--path-exclude=/usr/share/man/*"
        slurm-wlm munge)
    if ! apt_get "${install[@]}" >"$log" 2>&1; then
        # Usually stale or absent package lists (a fresh container): refresh them once and retry.
        apt_get update >>"$log" 2>&1 && apt_get "${install[@]}" >>"$log" 2>&1 || true
    fi
    if [[ -n $made_policy ]]; then
        rm -f "$policy"
        trap - EXIT TERM INT HUP
    fi
    if [[ -n $(missing_commands) ]]; then
        tail -n 5 "$log" >&2
        rm -f "$log"
        cannot_run "apt-get could not install slurm-wlm and munge (no network to the package registry?)"
    fi
    rm -f "$log"
}

# ---------------------------------------------------------------- configuration

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

memory_mb() { awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo; }

write_config() {
    cat >"$CONF" <<EOF
# Single-node Slurm written by slurm/local_slurm.sh; everything lives in $STATE.
ClusterName=mnistlocal
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# No systemd, no cgroups: track processes through /proc, do not bind tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=pmi2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Trust the CPU count below rather than the hardware, so small machines can run -n 4 or more.
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
KillWait=5
InactiveLimit=0
NodeName=$NODE NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$(memory_mb) State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE OverSubscribe=FORCE State=UP
EOF
}

# ---------------------------------------------------------------- daemons

launch() {
    # Run "$@" in the foreground mode of the daemon, in its own session (a timeout that kills the
    # caller's process group must not take it down), and record its PID: setsid execs without a
    # fork here, so $! is the daemon itself.
    local name=$1
    shift
    setsid "$@" </dev/null >>"$STATE/log/$name.out" 2>&1 &
    echo $! >"$STATE/pids/$name"
}

alive() {
    # Is the daemon recorded as $1 still running, and still that program (not a reused PID)?
    local pid
    pid=$(cat "$STATE/pids/$1" 2>/dev/null) || return 1
    [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]]
}

wait_for() {
    # wait_for SECONDS WHAT COMMAND...: poll COMMAND until it succeeds, failing if a daemon dies.
    local seconds=$1 what=$2 deadline=$((SECONDS + $1)) name
    shift 2
    until "$@" >/dev/null 2>&1; do
        for name in "${DAEMONS[@]}"; do
            if [[ -e $STATE/pids/$name ]] && ! alive "$name"; then
                fail "$name died while waiting for $what"
            fi
        done
        ((SECONDS < deadline)) || fail "no $what after $seconds s"
        sleep 0.5
    done
}

munge_works() { munge --socket="$SOCKET" --no-input | unmunge --socket="$SOCKET"; }
node_idle() { [[ $(SLURM_CONF=$CONF sinfo -h -n "$NODE" -o %T) == idle ]]; }

start() {
    [[ $(id -u) == 0 ]] || cannot_run "must be root (Slurm's daemons run as root here)"
    [[ -e $MARKER ]] && stop # an earlier instance, left by a killed run
    [[ -e $STATE ]] && fail "$STATE exists but was not made by this script; set LOCAL_SLURM_DIR"
    install_packages
    local port
    for port in "$CTLD_PORT" "$SLURMD_PORT"; do
        port_taken "$port" && cannot_run "port $port is in use (set LOCAL_SLURM_PORT)"
    done
    mkdir -p "$STATE"
    chmod 755 "$STATE" # munged insists that everyone can reach its socket
    touch "$MARKER"
    mkdir -p "$STATE"/{munge,ctld,slurmd,run,log,pids}
    chmod 755 "$STATE/munge"
    write_config
    mungekey --create --keyfile="$STATE/munge/munge.key"
    chmod 600 "$STATE/munge/munge.key"

    launch munged munged --foreground --socket="$SOCKET" --key-file="$STATE/munge/munge.key" \
        --pid-file="$STATE/run/munged.pid" --seed-file="$STATE/munge/munged.seed" \
        --log-file="$STATE/log/munged.log"
    wait_for 15 "munge credentials" munge_works
    launch slurmctld slurmctld -D -f "$CONF"
    launch slurmd slurmd -D -f "$CONF" -N "$NODE"
    wait_for "$WAIT" "idle node" node_idle
    say "Slurm is up: node $NODE ($CPUS CPUs), partition $PARTITION, PIDs" \
        "$(for name in "${DAEMONS[@]}"; do echo -n "$name=$(cat "$STATE/pids/$name") "; done)"
    echo "export SLURM_CONF=$CONF"
}

stop_daemons() {
    # SIGTERM to the recorded daemons named in "$@" that still run, then up to 10 s for them to exit.
    local name pids=() running pid waited
    for name in "$@"; do
        alive "$name" && pids+=("$(cat "$STATE/pids/$name")")
    done
    ((${#pids[@]})) || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for waited in $(seq 50); do
        running=()
        for pid in "${pids[@]}"; do
            [[ -d /proc/$pid ]] && running+=("$pid")
        done
        ((${#running[@]})) || return 0
        sleep 0.2
    done
    say "$* ignored SIGTERM for 10 s: SIGKILL"
    kill -KILL "${pids[@]}" 2>/dev/null || true
}

stop() {
    if [[ ! -e $MARKER ]]; then
        say "nothing to stop in $STATE"
        return 0
    fi
    if alive slurmctld; then
        # Our jobs first, so that no slurmstepd or task outlives the daemons.
        local jobs waited
        jobs=$(SLURM_CONF=$CONF timeout 10 squeue -h -o %A 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            SLURM_CONF=$CONF timeout 10 scancel $jobs || true
            for waited in $(seq 20); do
                [[ -z $(SLURM_CONF=$CONF timeout 10 squeue -h -o %A 2>/dev/null) ]] && break
                sleep 0.5
            done
        fi
    fi
    stop_daemons slurmd slurmctld
    stop_daemons munged # last: the others use it until they exit
    rm -rf "$STATE"
    say "stopped; removed $STATE"
}

status() {
    [[ -e $MARKER ]] || { echo "not running (no $STATE)"; return 3; }
    local name state=0
    for name in "${DAEMONS[@]}"; do
        if alive "$name"; then
            echo "$name $(cat "$STATE/pids/$name") running"
        else
            echo "$name not running"
            state=3
        fi
    done
    echo "export SLURM_CONF=$CONF"
    return "$state"
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *)
        echo "usage: $0 start|stop|status" >&2
        exit 2
        ;;
esac
