"""A reserved core: application threads off it, the FT thread and the heads on it (issue 16, item 4)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from ftkit.checkpoint.affinity import RESERVE_CORE_ENV, reserve_core_requested, reserved_split
from ftkit.config import Config
from ftkit.errors import ConfigError
from tests.conftest import run_python

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="per-thread affinity is Linux's")


def test_reserve_core_from_the_config_key_or_the_launcher_variable(monkeypatch):
    monkeypatch.delenv(RESERVE_CORE_ENV, raising=False)
    assert not reserve_core_requested(Config())
    assert reserve_core_requested(Config.from_string("[ftkit]\nreserve_core = 1\n"))
    monkeypatch.setenv(RESERVE_CORE_ENV, "1")
    assert reserve_core_requested(Config())
    monkeypatch.setenv(RESERVE_CORE_ENV, "yes")
    with pytest.raises(ConfigError, match=RESERVE_CORE_ENV):
        reserve_core_requested(Config())
    with pytest.raises(ConfigError, match="reserve_core"):
        Config.from_string("[ftkit]\nreserve_core = 2\n")


@linux_only
def test_split_keeps_the_last_cpu_of_the_mask():
    cpus = sorted(os.sched_getaffinity(0))
    split = reserved_split()
    if len(cpus) < 2:
        assert split is None
    else:
        assert split == (frozenset(cpus[:-1]), frozenset(cpus[-1:]))


PROG = textwrap.dedent('''
    """Head mode, asynchronous L3, reserved core: report where each thread of each process may run."""
    import json, os, sys, threading
    from pathlib import Path
    import numpy as np
    from mpi4py import MPI
    import ftkit
    from ftkit.checkpoint import affinity

    root = Path(sys.argv[1])
    world = MPI.COMM_WORLD
    start = sorted(os.sched_getaffinity(0))
    pids = world.allgather(os.getpid())
    cfg = ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global", meta_dir=root / "meta",
                       group_size=2, inline_l3=0, head=1, reserve_core=1, failure_timeout=60.0)
    ckpt = ftkit.Checkpointer(cfg)          # heads serve inside and exit
    a = np.arange(1000, dtype=np.float64) + ckpt.rank
    ckpt.protect("a", a)
    ckpt.checkpoint(3)
    ckpt.wait()
    main = sorted(os.sched_getaffinity(threading.get_native_id()))
    heads = {w: sorted(os.sched_getaffinity(p)) for w, p in enumerate(pids)
             if w not in ckpt.topology.app_world_ranks}
    complete = ckpt.status().checkpoints[-1][2]
    ckpt.finalize()
    print(json.dumps({"rank": ckpt.rank, "start": start, "main": main, "heads": heads,
                      "pinned": {k: sorted(v) for k, v in affinity.pinned.items()},
                      "complete": list(complete)}), flush=True)
''')


@pytest.mark.mpi
@linux_only
def test_reserved_core_pins_application_ft_thread_and_heads(tmp_path):
    """One job covers the three roles: in head mode the application's background thread waits for its head."""
    prog = tmp_path / "reserve.py"
    prog.write_text(PROG)
    res = run_python(4, prog, str(tmp_path / "run"), node_size=2, timeout=120).check()
    rows = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert len(rows) == 2, res.stdout + res.stderr
    for r in rows:
        assert 3 in r["complete"], r  # the asynchronous L3 completed
        if len(r["start"]) < 2:
            assert r["pinned"] == {} and r["main"] == r["start"]  # nothing to reserve on one CPU
            continue
        app, reserved = r["start"][:-1], r["start"][-1:]
        assert r["main"] == app and r["pinned"]["application"] == app
        assert r["pinned"]["ft-thread"] == reserved
        assert len(r["heads"]) == 2 and all(cpus == reserved for cpus in r["heads"].values()), r
