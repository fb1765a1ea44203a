#!/bin/bash
# Build FTI 1.6 and the C side of the side-by-side benchmark (ckpt_bench.c) under $FTI_ROOT (/tmp/ftkit-fti).
#
#   bash benchmarks/fti/build_fti.sh        # idempotent; prints the binary's path on the last line
#
# Source: fti-v1.6.tar.gz (git archive of tag v1.6 of github.com/leobago/fti, commit 38cf05cf) in
# ../shared/anchors/fti/ relative to the repository, or $FTI_TARBALL. Toolchain: Debian's Open MPI 4.1
# (mpicc), cmake and OpenSSL's headers (FTI's MD5), installed with apt-get when missing.
# Exit status 3 (and a message) when the tarball is absent: the driver then compares with the floors only.
# FTI_MPICC / FTI_MPICXX choose the MPI compiler wrappers (default mpicc / mpicxx); for Debian's Open MPI 4.1
# when mpicc is MPICH: FTI_ROOT=/tmp/ftkit-fti-ompi FTI_MPICC=mpicc.openmpi FTI_MPICXX=mpicxx.openmpi.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ROOT=${FTI_ROOT:-/tmp/ftkit-fti}
# ../shared relative to the repository; from a git worktree, relative to the main checkout
MAIN=$(cd "$(git -C "$REPO" rev-parse --git-common-dir 2>/dev/null || echo "$REPO/.git")/.." 2>/dev/null && pwd || echo "$REPO")
TARBALL=${FTI_TARBALL:-}
for t in "$REPO/../shared/anchors/fti/fti-v1.6.tar.gz" "$MAIN/../shared/anchors/fti/fti-v1.6.tar.gz"; do
  if [ -z "$TARBALL" ] && [ -f "$t" ]; then TARBALL=$t; fi
done
TARBALL=${TARBALL:-$REPO/../shared/anchors/fti/fti-v1.6.tar.gz}
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH   # Debian's mpicc, not a venv's
MPICC=${FTI_MPICC:-mpicc}
MPICXX=${FTI_MPICXX:-mpicxx}

if [ ! -f "$TARBALL" ]; then
  echo "FTI source tarball not found: $TARBALL (set FTI_TARBALL); comparing with the floors only" >&2
  exit 3
fi
# mpicc.openmpi comes with openmpi-bin, but links only with libopenmpi-dev: try a link
if ! command -v "$MPICC" >/dev/null || ! command -v cmake >/dev/null || [ ! -e /usr/include/openssl/md5.h ] ||
   ! echo 'int main(void) { return 0; }' | "$MPICC" -x c - -o /dev/null 2>/dev/null; then
  was=$(update-alternatives --query mpi-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/ {print $2}' || true)  # none: no MPI had them
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenmpi-dev openmpi-bin cmake libssl-dev zlib1g-dev
  # libopenmpi-dev takes over the system's libmpi.so and mpi.h (alternative mpi-x86_64-linux-gnu): give them
  # back to the MPI that had them (MPICH here), so nothing else built afterwards changes MPI
  if [ -n "$was" ]; then update-alternatives --set mpi-x86_64-linux-gnu "$was" >/dev/null; fi
fi
mkdir -p "$ROOT"
if [ ! -f "$ROOT/src/CMakeLists.txt" ]; then
  mkdir -p "$ROOT/src"
  tar -xf "$TARBALL" -C "$ROOT/src"       # a git archive: no top directory
fi
MPICC_PATH=$(command -v "$MPICC")
MPICXX_PATH=$(command -v "$MPICXX")
# CMake's FindMPI asks MPI_C_COMPILER (default: `mpicc`, MPICH here) for the headers and libraries, whatever
# CMAKE_C_COMPILER is: without it, FTI_MPICC=mpicc.openmpi gave a libfti.so linked to MPICH and a ckpt_fti
# linked to both. A build made with another wrapper is rebuilt.
if [ -f "$ROOT/build/CMakeCache.txt" ] && ! grep -qx "MPI_C_COMPILER:FILEPATH=$MPICC_PATH" "$ROOT/build/CMakeCache.txt"; then
  rm -rf "$ROOT/build" "$ROOT/install" "$ROOT/ckpt_fti"
fi
if [ ! -f "$ROOT/install/lib/libfti.so" ] && [ ! -f "$ROOT/install/lib64/libfti.so" ]; then
  cmake -S "$ROOT/src" -B "$ROOT/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$ROOT/install" \
        -DENABLE_EXAMPLES=OFF -DENABLE_FORTRAN=OFF -DENABLE_HDF5=OFF -DENABLE_TESTS=OFF \
        -DCMAKE_C_COMPILER="$MPICC" -DCMAKE_CXX_COMPILER="$MPICXX" \
        -DMPI_C_COMPILER="$MPICC_PATH" -DMPI_CXX_COMPILER="$MPICXX_PATH" >"$ROOT/cmake.log" 2>&1
  cmake --build "$ROOT/build" -j2 >"$ROOT/make.log" 2>&1
  cmake --install "$ROOT/build" >>"$ROOT/make.log" 2>&1
fi
LIBDIR=$ROOT/install/lib; [ -f "$LIBDIR/libfti.so" ] || LIBDIR=$ROOT/install/lib64
if [ ! -x "$ROOT/ckpt_fti" ] || [ "$HERE/ckpt_fti.c" -nt "$ROOT/ckpt_fti" ]; then
  "$MPICC" -O2 -std=gnu99 -o "$ROOT/ckpt_fti" "$HERE/ckpt_fti.c" -I"$ROOT/install/include" \
        -L"$LIBDIR" -Wl,-rpath,"$LIBDIR" -lfti -lm
fi
# One MPI library in the program and in libfti.so (two would mix ABIs: a wrong or crashing benchmark)
if [ "$(ldd "$ROOT/ckpt_fti" | grep -cE 'libmpi\.so|libmpich\.so')" != 1 ]; then
  echo "$ROOT/ckpt_fti links more than one MPI library ($(ldd "$ROOT/ckpt_fti" | grep -oE 'libmpi(ch)?\.so[.0-9]*' | tr '\n' ' ')): remove $ROOT/build and $ROOT/install and run again" >&2
  exit 1
fi
echo "$ROOT/ckpt_fti"
