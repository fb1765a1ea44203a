#!/bin/bash
# A SLURM batch script for a run that lives through many jobs (docs/guide/scheduler.md).
#
#   sbatch examples/slurm_job.sh          # again and again: each job continues where the last one stopped
#
# - SLURM sends SIGUSR1 to the job step's tasks 300 s before the time limit (--signal=USR1@300), where
#   Checkpointer() installed its handlers: should_exit() turns true on every rank, a checkpoint at
#   [ftkit] exit_level (L4) is taken, and the application ends cleanly. Without the signal, should_exit()
#   still reads the end from SLURM_JOB_END_TIME / squeue and stops exit_margin seconds before it.
# - `ftkit halt ftkit-meta` from a login node stops the job the same way at its next step.
# - `ftkit launch --restarts 3 --spare-nodes 1` relaunches the run inside the allocation after a failure, on
#   the healthy nodes: the fifth node is held back and takes the place of the first one lost; after that the
#   run goes on with fewer nodes. --no-kill keeps the allocation when one of its nodes fails.
# - `ftkit flush` copies the newest complete checkpoint to the global directory before the node-local disks
#   are purged, so the next job recovers from L4.
#SBATCH --job-name=heat
#SBATCH --nodes=5
#SBATCH --ntasks-per-node=2
#SBATCH --time=01:00:00
#SBATCH --signal=USR1@300
#SBATCH --no-kill
set -u

CONFIG=ftkit.ini          # ckpt_dir = $SLURM_TMPDIR/ftkit-local, glbl_dir/meta_dir on the parallel file system
META=ftkit-meta
STEPS=100000
SPARE_NODES=1
NPROCS=$(( (SLURM_JOB_NUM_NODES - SPARE_NODES) * 2 ))   # 2 ranks on each node that is not held back

# A pending halt (`ftkit halt ftkit-meta --show`) would stop this job at its first step: say so.
ftkit halt "$META" --show 2>/dev/null || true

ftkit launch -n "$NPROCS" --restarts 3 --spare-nodes "$SPARE_NODES" --config "$CONFIG" -- \
    python examples/heat.py --config "$CONFIG" --steps "$STEPS"
rc=$?

# Whatever happened, keep the newest checkpoint: one process per node copies what its local disk holds.
srun --ntasks-per-node=1 --nodes="$SLURM_JOB_NUM_NODES" ftkit flush "$META"
flush_rc=$?
[ "$flush_rc" -eq 2 ] && echo "ftkit flush: nothing to keep (the run completed, or nothing complete survives)"

if [ "$rc" -eq 0 ] && ftkit ls "$META" >/dev/null 2>&1; then
    echo "the run stopped early (walltime, signal or halt): submit again to continue"
fi
exit "$rc"
