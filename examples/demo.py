"""ftkit demo: run the heat example on emulated nodes, break it, and show the result is bit-for-bit unchanged.

Each scene is a function in :data:`SCENES` taking the shared :class:`Demo` state and returning True on
success; later features add their scenes to the list (node loss, ABFT, a kill in the middle of a multiply...).

Run: ``make demo`` or ``python examples/demo.py --ranks 8``. Exits 1 if any scene fails.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ftkit.inject import delete_node_dir
from ftkit.launch import MPIResult, run_mpi

HEAT = Path(__file__).resolve().with_name("heat.py")
MULTIPLY = Path(__file__).resolve().with_name("resilient_multiply.py")
CG = Path(__file__).resolve().with_name("cg.py")

CONFIG = """\
[basic]
ckpt_dir = {d}/local
glbl_dir = {d}/global
meta_dir = {d}/meta
node_size = {node_size}
ckpt_l1 = 4
ckpt_l4 = 15
[ftkit]
interval_unit = iterations
failure_timeout = 120
"""


@dataclass
class Demo:
    """State shared by the scenes."""

    workdir: Path
    ranks: int
    node_size: int
    steps: int
    size: int
    timeout: float
    reference: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)

    def config(self, name: str) -> Path:
        """Write a fresh config whose run directories are under ``workdir/name``; return its path."""
        d = self.workdir / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        path = d / "ftkit.ini"
        path.write_text(CONFIG.format(d=d, node_size=self.node_size))
        return path

    def heat(self, config: Path, *extra: str, save: Path | None = None, spares: int = 0) -> MPIResult:
        """Run the heat example on ``ranks`` ranks in emulated nodes of ``node_size`` ranks (+ spares)."""
        args = [sys.executable, str(HEAT), "--steps", str(self.steps), "--size", str(self.size),
                "--config", str(config), *extra]
        if save is not None:
            args += ["--save", str(save)]
        t0 = time.perf_counter()
        result = run_mpi(self.ranks, args, timeout=self.timeout, node_size=self.node_size, cwd=config.parent,
                         spares=spares)
        for line in result.stdout.splitlines():
            if line.startswith("heat:"):
                say(f"    | {line}")
        say(f"    ({time.perf_counter() - t0:.1f} s)")
        return result

    def compare(self, field_path: Path) -> bool:
        """Compare a saved final field with the reference; print the max abs difference."""
        if not field_path.exists() or self.reference is None:
            say("    no final field to compare")
            return False
        got = np.load(field_path, allow_pickle=False)
        diff = float(np.max(np.abs(got - self.reference)))
        identical = got.tobytes() == self.reference.tobytes()
        say(f"    final field vs failure-free run: max abs difference {diff:g}, "
            f"{'bit-for-bit identical' if identical else 'DIFFERENT'}")
        return identical and diff == 0.0


def say(text: str) -> None:
    print(text, flush=True)


def scene_reference(demo: Demo) -> bool:
    """A failure-free run: the reference field."""
    cfg = demo.config("reference")
    out = cfg.parent / "field.npy"
    r = demo.heat(cfg, save=out)
    if r.returncode != 0 or not out.exists():
        say(f"    reference run failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
        return False
    demo.reference = np.load(out, allow_pickle=False)
    return True


def _kill_step(demo: Demo) -> int:
    return demo.steps * 2 // 3 + 1


def scene_kill_and_recover(demo: Demo) -> bool:
    """Kill a rank mid-run (SIGKILL), relaunch: the run recovers from its last L1 checkpoint."""
    cfg = demo.config("kill")
    victim = demo.ranks // 2 + 1 if demo.ranks > 2 else 0
    say(f"    launching, rank {victim} will be SIGKILLed at step {_kill_step(demo)} ...")
    r = demo.heat(cfg, "--kill-at", str(_kill_step(demo)), "--kill-rank", str(victim))
    if "killing itself" not in r.stdout or "digest" in r.stdout:
        say("    the run was not killed as planned")
        return False
    say("    job died; relaunching the same command ...")
    out = cfg.parent / "field.npy"
    r = demo.heat(cfg, save=out)
    m = re.search(r"recovered checkpoint (\d+) from level (\d+) at step (\d+)", r.stdout)
    if r.returncode != 0 or not m:
        say(f"    relaunch did not recover (exit {r.returncode}):\n{r.stderr[-2000:]}")
        return False
    return demo.compare(out)


def scene_lose_local_storage(demo: Demo) -> bool:
    """Kill the job, delete every node-local directory: recovery falls back to the L4 (PFS) checkpoint."""
    cfg = demo.config("pfs")
    r = demo.heat(cfg, "--kill-at", str(_kill_step(demo)), "--kill-rank", "0")
    if "killing itself" not in r.stdout:
        return False
    nodes = sorted((cfg.parent / "local").glob("node*"))
    for d in nodes:
        delete_node_dir(d)
    say(f"    deleted {len(nodes)} node-local directories; relaunching ...")
    out = cfg.parent / "field.npy"
    r = demo.heat(cfg, save=out)
    if r.returncode != 0 or "from level 4" not in r.stdout:
        say(f"    relaunch did not recover from L4 (exit {r.returncode}):\n{r.stderr[-2000:]}")
        return False
    return demo.compare(out)


NODE_LOSS_CONFIG = """\
[basic]
ckpt_dir = {d}/local
glbl_dir = {d}/global
meta_dir = {d}/meta
node_size = {node_size}
group_size = {group_size}
ckpt_l1 = 0
ckpt_l3 = 5
[ftkit]
interval_unit = iterations
l3_code = rs
failure_timeout = 120
"""


def scene_lose_a_node(demo: Demo) -> bool:
    """Lose a whole emulated node (its ranks killed, its local directory deleted): recover from L3."""
    nodes = demo.ranks // demo.node_size
    if nodes < 2:
        say("    skipped: needs at least 2 emulated nodes")
        return True
    group_size = max(2, min(4, nodes))
    cfg = demo.config("node-loss")
    cfg.write_text(NODE_LOSS_CONFIG.format(d=cfg.parent, node_size=demo.node_size, group_size=group_size))
    lost = 1
    victim = lost * demo.node_size  # first rank of node 1; the job (and the node's other ranks) die with it
    say(f"    L3 (Reed-Solomon, groups of {group_size} nodes) every 5 steps; rank {victim} of node {lost} is "
        f"SIGKILLed at step {_kill_step(demo)} ...")
    r = demo.heat(cfg, "--kill-at", str(_kill_step(demo)), "--kill-rank", str(victim))
    if "killing itself" not in r.stdout or "digest" in r.stdout:
        say("    the run was not killed as planned")
        return False
    delete_node_dir(cfg.parent / "local" / f"node{lost}")
    say(f"    job died; deleted node {lost}'s local directory (its L1 and parity files); relaunching ...")
    out = cfg.parent / "field.npy"
    r = demo.heat(cfg, save=out)
    if r.returncode != 0 or "from level 3" not in r.stdout:
        say(f"    relaunch did not recover from L3 (exit {r.returncode}):\n{r.stdout[-1000:]}\n"
            f"{r.stderr[-2000:]}")
        return False
    return demo.compare(out)


def scene_online_spares(demo: Demo) -> bool:
    """With spare ranks, a rank and then a whole node die and the job finishes without a relaunch."""
    nodes = demo.ranks // demo.node_size
    if nodes < 2:
        say("    skipped: needs at least 2 emulated nodes")
        return True
    spares = 1 + demo.node_size  # one for the rank, one per rank of the node
    group_size = max(2, min(4, nodes))
    cfg = demo.config("online")
    cfg.write_text(NODE_LOSS_CONFIG.format(d=cfg.parent, node_size=demo.node_size, group_size=group_size))
    first, second = demo.steps // 3, 2 * demo.steps // 3
    victim, node = demo.ranks // 2 + 1, nodes - 1
    ranks = ",".join(str(node * demo.node_size + i) for i in range(demo.node_size))
    say(f"    {demo.ranks} ranks + {spares} spares (ftkit launch --spares {spares}), L3 every 5 steps; rank "
        f"{victim} is SIGKILLed at step {first}, then node {node} (ranks {ranks}, local directory deleted) "
        f"at step {second} ...")
    out = cfg.parent / "field.npy"
    r = demo.heat(cfg, "--kill", f"{first}:{victim}", "--kill", f"{second}:{ranks}", save=out, spares=spares)
    recoveries = re.findall(r"online recovery: ranks \[([\d, ]+)\] replaced", r.stdout)
    if r.returncode != 0 or len(recoveries) != 2:
        say(f"    the job did not finish with two online recoveries (exit {r.returncode}):\n"
            f"{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
        return False
    say("    the job finished without a relaunch")
    return demo.compare(out)


def scene_continue_on_fewer_ranks(demo: Demo) -> bool:
    """Without spares, a rank dies and the survivors go on with fewer ranks (heat.py --shrink)."""
    if demo.ranks < 3:
        say("    skipped: needs at least 3 ranks")
        return True
    cfg = demo.config("shrink")
    victim = demo.ranks // 2 + 1
    say(f"    {demo.ranks} ranks, no spare (heat.py --shrink); rank {victim} is SIGKILLed at step "
        f"{_kill_step(demo)} ...")
    out = cfg.parent / "field.npy"
    r = demo.heat(cfg, "--shrink", "--kill-at", str(_kill_step(demo)), "--kill-rank", str(victim), save=out)
    if r.returncode != 0 or f"continued on {demo.ranks - 1} of {demo.ranks} ranks" not in r.stdout:
        say(f"    the job did not continue on {demo.ranks - 1} ranks (exit {r.returncode}):\n"
            f"{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
        return False
    say("    the job finished on fewer ranks without a relaunch")
    return demo.compare(out)


def scene_multiply_survives_kill(demo: Demo) -> bool:
    """A rank is SIGKILLed in the middle of a distributed multiply; the survivors still return A @ B."""
    victim = demo.ranks // 2 + 1 if demo.ranks > 2 else 0
    say(f"    {demo.ranks} ranks multiply 256 x 256 matrices; rank {victim} is SIGKILLed at step 3 of 8 ...")
    r = run_mpi(demo.ranks, [sys.executable, str(MULTIPLY), "--n", "256", "--nb", "32", "--kill-rank",
                             str(victim), "--kill-step", "3", "--store", str(demo.workdir / "multiply")],
                timeout=demo.timeout)
    for line in r.stdout.splitlines():
        say(f"    {line}")
    return "RESULT ok=True" in r.stdout


def scene_bit_flip_corrected(demo: Demo) -> bool:
    """A bit flip hits a matrix product inside CG; ABFT block checksums locate and correct it."""
    ranks = 4 if demo.ranks >= 4 else 1
    say(f"    CG on {ranks} ranks, every 10th product checked by ft_pdgemm; product 30 gets a bit flip ...")
    r = run_mpi(ranks, [sys.executable, str(CG), "--flip-at", "30"], timeout=demo.timeout)
    for line in r.stdout.splitlines():
        if line.startswith(("CG ", "  call 30", "RESULT")):
            say(f"    | {line}")
    m = re.search(r"RESULT iterations=(\d+) reference=(\d+) .* detected=(\d+) corrected=(\d+)", r.stdout)
    if r.returncode != 0 or not m:
        say(f"    CG run failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
        return False
    iterations, reference, detected, corrected = map(int, m.groups())
    say(f"    flip detected {detected}, corrected {corrected}; CG converged in {iterations} iterations "
        f"(failure-free: {reference})")
    return detected == 1 and corrected == 1 and iterations == reference


#: The demo's scenes, in order: (title, function). Later features append theirs.
SCENES: list[tuple[str, Callable[[Demo], bool]]] = [
    ("failure-free reference run", scene_reference),
    ("rank killed mid-run -> relaunch -> recover from L1", scene_kill_and_recover),
    ("all node-local storage lost -> recover from L4", scene_lose_local_storage),
    ("a whole node lost (ranks killed, local dir deleted) -> recover from L3", scene_lose_a_node),
    ("spare ranks: a rank, then a whole node die -> the job goes on online, no relaunch",
     scene_online_spares),
    ("no spare left: a rank dies -> the survivors continue on fewer ranks, no relaunch",
     scene_continue_on_fewer_ranks),
    ("rank killed mid-multiply -> survivors finish, product still right", scene_multiply_survives_kill),
    ("silent bit flip in a product inside CG -> ABFT checksums locate and correct it",
     scene_bit_flip_corrected),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="ftkit demo: checkpoint/restart of a heat solver under faults")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--node-size", type=int, default=2, help="ranks per emulated node")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--timeout", type=float, default=180.0, help="hard limit per MPI job (s)")
    p.add_argument("--workdir", default=None, help="where runs write (default: a temporary directory)")
    p.add_argument("--only", default=None, help="run only scenes whose title contains this text "
                                                 "(the reference always runs)")
    args = p.parse_args(argv)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="ftkit-demo-"))
    demo = Demo(workdir.resolve(), args.ranks, args.node_size, args.steps, args.size, args.timeout)
    say(f"ftkit demo: heat equation {args.size}x{args.size}, {args.steps} steps, {args.ranks} ranks in "
        f"{args.ranks // args.node_size} emulated nodes; runs in {demo.workdir}")
    t0 = time.perf_counter()
    results = []
    for i, (title, scene) in enumerate(SCENES, 1):
        if args.only and i > 1 and args.only not in title:
            continue
        say(f"[{i}/{len(SCENES)}] {title}")
        ok = scene(demo)
        results.append((title, ok))
        say(f"    -> {'OK' if ok else 'FAILED'}")
        if i == 1 and not ok:
            break
    failed = [t for t, ok in results if not ok]
    elapsed = time.perf_counter() - t0
    say(f"ftkit demo: {len(results) - len(failed)}/{len(results)} scenes OK in {elapsed:.0f} s")
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
