#!/usr/bin/env bash
# Checkpoint/restart under one launcher: for each level L, a failure-free reference run of examples/heat.py,
# a run in which rank 1 SIGKILLs itself at step 12 (the launcher ends the job), the loss the level covers
# (L1: none; L2/L3: node 1's node-local directory deleted; L4: every node-local directory deleted), then a
# restart that must say "recovered ... from level L" and print the reference digest bit for bit.
#   usage: heat_levels.sh NAME WORK PYTHON "LAUNCHER ARGS" [LEVELS]
#   e.g.   heat_levels.sh mpiexec /tmp/w /tmp/v/bin/python "mpiexec.mpich -n 4" "1 2 3 4"
# 4 ranks in 2 emulated nodes (node_size = 2), group_size = 2. One line per level; exit 1 if any failed.
set -u
NAME=$1; WORK=$2; PY=$3; LAUNCH=$4; LEVELS=${5:-"1 2 3 4"}
HEAT=$(cd "$(dirname "$0")/../.." && pwd)/examples/heat.py
T=${JOB_TIMEOUT:-240}; STEPS=30; SIZE=64
failed=0
for L in $LEVELS; do
    d=$WORK/$NAME/L$L
    rm -rf "$d"; mkdir -p "$d"
    for run in ref run; do
        cat > "$d/$run.ini" <<INI
[basic]
ckpt_dir = $d/$run/local
glbl_dir = $d/$run/global
meta_dir = $d/$run/meta
node_size = 2
group_size = 2
ckpt_l$L = 5
[ftkit]
interval_unit = iterations
failure_timeout = 60
INI
    done
    (cd "$d" && timeout -k 10 $T $LAUNCH "$PY" "$HEAT" --steps $STEPS --size $SIZE --config "$d/ref.ini") \
        > "$d/ref.out" 2>&1
    ref_rc=$?
    (cd "$d" && timeout -k 10 $T $LAUNCH "$PY" "$HEAT" --steps $STEPS --size $SIZE --config "$d/run.ini" \
        --kill-at 12 --kill-rank 1 --verbose) > "$d/kill.out" 2>&1
    kill_rc=$?
    case $L in
        2|3) rm -rf "$d/run/local/node1" ;;
        4) rm -rf "$d/run/local"/node* ;;
    esac
    (cd "$d" && timeout -k 10 $T $LAUNCH "$PY" "$HEAT" --steps $STEPS --size $SIZE --config "$d/run.ini") \
        > "$d/restart.out" 2>&1
    rs_rc=$?
    ref=$(grep -m1 '^digest' "$d/ref.out" | awk '{print $2}')
    got=$(grep -m1 '^digest' "$d/restart.out" | awk '{print $2}')
    # heat's own line, not ftkit's log line "[ftkit ...] recovered checkpoint N from L<L>: ..." (the two
    # streams are merged: either may come first)
    rec=$(grep -m1 '^heat: recovered' "$d/restart.out" | sed 's/^heat: //')
    ok=yes
    [ $ref_rc -eq 0 ] && [ -n "$ref" ] && [ "$ref" = "$got" ] && [ $rs_rc -eq 0 ] || ok=no
    [ $kill_rc -ne 0 ] || ok=no                      # the killed run must not pass for a clean one
    grep -q "killing itself at step 12" "$d/kill.out" || ok=no
    echo "$rec" | grep -q "from level $L" || ok=no
    [ $ok = yes ] || failed=1
    echo "$NAME L$L: $( [ $ok = yes ] && echo PASS || echo FAIL) ref=$ref restart=$got kill_rc=$kill_rc" \
         "restart_rc=$rs_rc recovered='$rec' (outputs in $d)"
done
exit $failed
