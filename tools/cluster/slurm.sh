#!/usr/bin/env bash
# Start or stop a one-node SLURM cluster (munged, slurmctld, slurmd) whose state lives under DIR.
#   usage: slurm.sh start|stop DIR
# start writes DIR/slurm.conf (use it with SLURM_CONF=DIR/slurm.conf) and waits (bounded) for the node to be
# idle; every daemon's pid goes to DIR/<name>.bgpid, and stop ends exactly those processes (and their
# children), waiting for each to be gone.
set -euo pipefail
what=$1; D=$2
HERE=$(cd "$(dirname "$0")" && pwd)

stop_one() {  # $1 = name: TERM the daemon and its children, wait up to 20 s, then KILL
    local f=$D/$1.bgpid pid kids i
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    kids=$(ps -o pid= --ppid "$pid" 2>/dev/null || true)
    kill -TERM "$pid" $kids 2>/dev/null || true
    for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$pid" $kids 2>/dev/null || true
    rm -f "$f"
}

case $what in
start)
    mkdir -p "$D/state" "$D/spool" "$D/log"
    sed -e "s|@HOST@|$(hostname)|g" -e "s|@DIR@|$D|g" -e "s|@CPUS@|$(nproc)|g" "$HERE/slurm.conf.in" \
        > "$D/slurm.conf"
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged --foreground > "$D/log/munged.out" 2>&1 &
    echo $! > "$D/munged.bgpid"
    for i in $(seq 1 40); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
    munge -n | unmunge | grep -q "STATUS: *Success" || { echo "slurm.sh: munged did not start" >&2; exit 1; }
    /usr/sbin/slurmctld -D -f "$D/slurm.conf" > "$D/log/slurmctld.out" 2>&1 &
    echo $! > "$D/slurmctld.bgpid"
    /usr/sbin/slurmd -D -f "$D/slurm.conf" > "$D/log/slurmd.out" 2>&1 &
    echo $! > "$D/slurmd.bgpid"
    for i in $(seq 1 120); do
        SLURM_CONF=$D/slurm.conf timeout 10 sinfo -h -o %T 2>/dev/null | grep -qx idle && break
        sleep 0.5
    done
    SLURM_CONF=$D/slurm.conf timeout 10 sinfo -h -o %T | grep -qx idle || {
        echo "slurm.sh: the node did not become idle; logs in $D/log" >&2; exit 1; }
    ;;
stop)
    for name in slurmd slurmctld munged; do stop_one $name; done
    ;;
*)
    echo "usage: slurm.sh start|stop DIR" >&2; exit 2 ;;
esac
