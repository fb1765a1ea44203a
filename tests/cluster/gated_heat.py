"""examples/heat.py with a gate, for host faults at a known point of a run (tests/cluster).

``--gate-at STEP --gate-dir DIR``: in a fresh run, each rank that reaches STEP (after the checkpoints of the
steps before it) creates ``DIR/held.<rank>`` and waits until ``DIR/open`` exists (at most ``--gate-max``
seconds, then it goes on anyway), so a test can fault a host while every rank is known to be between two
checkpoints, without timing. Every other argument goes to heat.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

HEAT = Path(__file__).resolve().parents[2] / "examples" / "heat.py"
_spec = importlib.util.spec_from_file_location("ftkit_example_heat", HEAT)
heat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(heat)


def main() -> int:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--gate-at", type=int, default=None)
    p.add_argument("--gate-dir", default=None)
    p.add_argument("--gate-max", type=float, default=120.0)
    gate, rest = p.parse_known_args()
    if gate.gate_at is not None:
        maybe_kill = heat._maybe_kill

        def gated(ckpt, s, args):  # type: ignore[no-untyped-def]
            if s == gate.gate_at and not ckpt.restarted:
                d = Path(gate.gate_dir)
                (d / f"held.{ckpt.comm.rank}").write_text(f"{os.uname().nodename} {os.getpid()}\n")
                deadline = time.monotonic() + gate.gate_max
                while not (d / "open").exists() and time.monotonic() < deadline:
                    time.sleep(0.02)
            maybe_kill(ckpt, s, args)

        heat._maybe_kill = gated
    return heat.main(rest)


if __name__ == "__main__":
    sys.exit(main())
