"""examples/heat.py with gates at several steps, held in every run (fresh or relaunched) until opened.

``--gates S1,S2,... --gate-dir DIR``: a rank reaching step S (after the checkpoints of the steps before it)
while ``DIR/open.S`` does not exist creates ``DIR/held.S.<rank>`` and waits until ``DIR/open.S`` exists (at
most ``--gate-max`` seconds, then it goes on anyway). A test faults a host while every rank of the current
run is held, opens the gate, and does the same at the next gate in the relaunched run. Every other argument
goes to heat.py.
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
    p.add_argument("--gates", default="")
    p.add_argument("--gate-dir", default=None)
    p.add_argument("--gate-max", type=float, default=120.0)
    gate, rest = p.parse_known_args()
    steps = {int(s) for s in gate.gates.split(",") if s}
    maybe_kill = heat._maybe_kill

    def gated(ckpt, s, args):  # type: ignore[no-untyped-def]
        d = Path(gate.gate_dir) if gate.gate_dir else None
        if d is not None and s in steps and not (d / f"open.{s}").exists():
            (d / f"held.{s}.{ckpt.comm.rank}").write_text(f"{os.uname().nodename} {os.getpid()}\n")
            deadline = time.monotonic() + gate.gate_max
            while not (d / f"open.{s}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        maybe_kill(ckpt, s, args)

    heat._maybe_kill = gated
    return heat.main(rest)


if __name__ == "__main__":
    sys.exit(main())
