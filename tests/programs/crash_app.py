"""A rank of a Checkpointer job crashes (SIGSEGV) while the others wait in a collective (test_jobexit).

usage: crash_app.py CONFIG VICTIM
"""

import ctypes
import sys

from mpi4py import MPI

import ftkit


def read_address_zero() -> None:
    ctypes.string_at(0)  # SIGSEGV: a crash inside native code, as Open MPI's Sendrecv does after a failure


def main() -> None:
    ckpt = ftkit.Checkpointer(sys.argv[1], MPI.COMM_WORLD)
    if ckpt.rank == int(sys.argv[2]):
        read_address_zero()
    ckpt.comm.Barrier()  # the others wait for the crashed rank: ULFM raises, the exit hook ends them
    ckpt.finalize()


if __name__ == "__main__":
    main()
