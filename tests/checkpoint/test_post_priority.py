"""Background post-processing runs at a lowered priority; the codec is warmed up where L3 will encode."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading

import pytest

from ftkit.checkpoint.post import DEFAULT_POST_NICE, POST_NICE_ENV, lower_priority, post_nice
from ftkit.checkpoint.warmup import warm_up_codec, will_encode
from ftkit.config import Config
from ftkit.errors import ConfigError
from ftkit.topology import plan_topology
from tests.conftest import run_python

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")


def test_post_nice_default_and_environment(monkeypatch):
    monkeypatch.delenv(POST_NICE_ENV, raising=False)
    assert post_nice() == DEFAULT_POST_NICE
    monkeypatch.setenv(POST_NICE_ENV, "0")
    assert post_nice() == 0
    monkeypatch.setenv(POST_NICE_ENV, " 19 ")
    assert post_nice() == 19
    for bad in ("-1", "20", "low"):
        monkeypatch.setenv(POST_NICE_ENV, bad)
        with pytest.raises(ConfigError, match=POST_NICE_ENV):
            post_nice()


@linux_only
def test_lower_priority_changes_only_the_calling_thread_and_its_children():
    main_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: dict[str, int] = {}

    def child() -> None:
        seen["child"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def body() -> None:
        seen["before"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        seen["returned"] = lower_priority(3)
        seen["after"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        seen["unchanged"] = lower_priority(0)
        t = threading.Thread(target=child)
        t.start()
        t.join()

    t = threading.Thread(target=body)
    t.start()
    t.join()
    expect = min(19, seen["before"] + 3)
    assert seen["after"] == seen["returned"] == seen["unchanged"] == expect
    assert seen["child"] == expect  # threads started by a lowered thread inherit its priority
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main_before


def _topology(nodes: int, group_size: int = 4):
    node_ids = [n for n in range(nodes) for _ in range(2)]
    return plan_topology(node_ids, 0, group_size=group_size, ckpt_dir="/tmp/unused", need_groups=False)


def test_will_encode_only_for_scheduled_or_asynchronous_rs():
    four, two = _topology(4), _topology(2)
    assert will_encode(Config(inline_l3=0), four)
    assert will_encode(Config(ckpt_l3=5), four)
    assert not will_encode(Config(), four)                       # L3 only by an explicit inline call
    assert not will_encode(Config(inline_l3=0, l3_code="xor"), four)  # XOR needs no compiled kernels
    assert not will_encode(Config(inline_l3=0), two)             # no groups: no L3 at all


def test_warm_up_codec_runs_locally():
    assert warm_up_codec(4) >= 0.0
    assert warm_up_codec(1) >= 0.0  # clamped to the smallest code


PROG = textwrap.dedent('''
    """Report the nice value of the application thread, the background job and the head's handler."""
    import json, os, sys, threading
    from mpi4py import MPI
    from ftkit.checkpoint.head import HeadClient, HeadServer, setup_heads
    from ftkit.checkpoint.post import PostComms, PostJob, make_thread_executor
    from ftkit.topology import detect_node_ids, plan_topology

    def nice():
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    head = sys.argv[1] == "head"
    world = MPI.COMM_WORLD
    base = nice()
    topo = plan_topology(detect_node_ids(world), world.Get_rank(), head=int(head), ckpt_dir="/tmp/unused",
                         need_groups=False)
    seen = {}
    if head:
        links = setup_heads(world, topo)
        if links.is_head:
            members = [topo.app_world_ranks[r] for r in topo.node_ranks(topo.node_id)]
            def handler(requests, links):
                seen["work"] = nice()
            HeadServer(links, members, handler, timeout=60).serve()
            print(json.dumps({"head": world.Get_rank(), "base": base, "work": seen["work"]}), flush=True)
            links.free()
            sys.exit(0)
        comm = links.app
        client = HeadClient(links, timeout=60)
        run = lambda comms: client.request({"id": 1, "level": 4})
    else:
        comm = world
        def run(comms):
            seen["work"] = nice()
    executor = make_thread_executor(PostComms(comm), timeout=60)
    executor.submit(PostJob(1, 4, run=run))
    executor.wait()
    executor.close()
    if head:
        client.finish()
    print(json.dumps({"rank": comm.Get_rank(), "base": base, "app": nice(), "work": seen.get("work")}),
          flush=True)
''')


@pytest.mark.mpi
@linux_only
@pytest.mark.parametrize("mode", ["thread", "head"])
def test_background_work_runs_at_lowered_priority(tmp_path, mode):
    prog = tmp_path / "prio.py"
    prog.write_text(PROG)
    res = run_python(4, prog, mode, node_size=2, env={POST_NICE_ENV: "7"}, timeout=120).check()
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    apps = [x for x in lines if "rank" in x]
    heads = [x for x in lines if "head" in x]
    assert len(apps) == (2 if mode == "head" else 4), res.stdout + res.stderr
    for r in apps:
        assert r["app"] == r["base"]  # the application's thread keeps its priority
        if mode == "thread":
            assert r["work"] == min(19, r["base"] + 7)
    if mode == "head":
        assert len(heads) == 2 and all(h["work"] == min(19, h["base"] + 7) for h in heads)


WARM = textwrap.dedent('''
    """Create a Checkpointer and take no L3 checkpoint: report, at exit, whether the codec was loaded."""
    import atexit, json, sys
    from pathlib import Path
    from mpi4py import MPI
    import ftkit

    root, mode = Path(sys.argv[1]), sys.argv[2]
    world = MPI.COMM_WORLD.Get_rank()
    atexit.register(lambda: print(json.dumps({"world": world, "codec": "ftkit.codec" in sys.modules}),
                                  flush=True))
    cfg = ftkit.Config(ckpt_dir=root / "local", glbl_dir=root / "global", meta_dir=root / "meta",
                       head=1 if mode == "head" else 0, group_size=2, inline_l3=0 if mode != "inline" else 1,
                       failure_timeout=60.0)
    ckpt = ftkit.Checkpointer(cfg)
    ckpt.finalize()
''')


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["thread", "head", "inline"])
def test_codec_is_loaded_at_start_by_the_processes_that_encode(tmp_path, mode):
    prog = tmp_path / "warm.py"
    prog.write_text(WARM)
    n, node_size = (6, 3) if mode == "head" else (4, 2)
    res = run_python(n, prog, str(tmp_path / "run"), mode, node_size=node_size, timeout=120).check()
    seen = {x["world"]: x["codec"] for x in map(json.loads, res.stdout.splitlines()) if "world" in x}
    assert len(seen) == n, res.stdout + res.stderr
    if mode == "head":
        # Heads (first rank of each node) encode, application ranks only hand them their files.
        assert seen == {w: w % 3 == 0 for w in range(n)}
    else:
        # Asynchronous L3 without heads: every rank encodes; inline L3 without a schedule: loaded lazily.
        assert all(v == (mode == "thread") for v in seen.values())
