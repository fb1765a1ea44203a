"""``ftkit model reliability|encoding|interval``: the models from the command line.

Every bad argument raises :class:`~ftkit.errors.ModelError`; ``ftkit.cli.main`` prints it on one line and
exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..errors import ModelError
from ..models.units import format_duration, format_size, parse_duration, parse_size

__all__ = ["add_parser", "run_reliability", "run_encoding", "run_interval"]


def add_parser(subparsers) -> None:  # type: ignore[no-untyped-def]
    """Register ``model`` and its sub-subcommands ``reliability``, ``encoding`` and ``interval``."""
    model = subparsers.add_parser(
        "model", help="reliability and cost models (failure probability, encoding time, interval)",
        description="Models of reference 002 (FTI, SC11): catastrophic-failure probability of RS/XOR/partner "
                    "groups, Reed-Solomon encoding time, and the optimal checkpoint interval.")
    sub = model.add_subparsers(dest="model_command", metavar="MODEL")
    model.set_defaults(func=lambda args: _help(model))

    rel = sub.add_parser(
        "reliability", help="catastrophic-failure probability per scheme and group size",
        description="Probability that a failure event destroys a checkpoint level "
                    "(eq. 3: Σ Pr(x)·Pr(x_Ct|x)) for RS (FTI, t = k/2), XOR (SCR, t = 1) and partner copy "
                    "(ring) over group sizes, with "
                    "the exact conditional and the paper's eq. (4). With --failed X, print Pr(x_Ct | x = X) "
                    "instead (eq. 4, exact, and Monte Carlo with --trials).")
    rel.add_argument("--nodes", default="1408", help="number of nodes n (default 1408, TSUBAME2.0)")
    rel.add_argument("--group-sizes", default="4,8,16", help="group sizes k, comma-separated")
    rel.add_argument("--schemes", default="rs,xor,partner",
                     help="schemes: rs, xor, partner, or t=T for a code tolerating T failures per group")
    rel.add_argument("--tolerance", default=None, metavar="T",
                     help="shorthand for --schemes t=T (a threshold code tolerating T failures per group)")
    rel.add_argument("--failures", default=None, metavar="CSV",
                     help="failure log: CSV with header x,count (default: two built-in scenarios)")
    rel.add_argument("--failed", default=None, metavar="X",
                     help="print Pr(x_Ct | x = X) for X simultaneous failures instead of eq. (3)")
    rel.add_argument("--trials", default="0", help="Monte Carlo trials with --failed (default 0: off)")
    rel.add_argument("--seed", default=None, help="Monte Carlo seed")
    rel.add_argument("--plot", default=None, metavar="PNG", help="write the comparison plot to this PNG file")
    rel.add_argument("--json", action="store_true", help="print JSON instead of a table")
    rel.set_defaults(func=run_reliability)

    enc = sub.add_parser(
        "encoding", help="predict Reed-Solomon (L3) encoding time, eq. (1)/(2)",
        description="Predict the time one group member takes to RS-encode its checkpoint (eq. 1: "
                    "T = t·(r·z + m·(a + b·z + e·z) + w·z); eq. 2: T = m·e·s). Parameters come from "
                    "--measure (quick measurements on this machine: codec throughput, file read/write, "
                    "MPI ping-pong), "
                    "from a JSON file saved earlier (--params), or from --e/--r/--w/--a/--b.")
    enc.add_argument("--measure", action="store_true", help="measure e, r, w, a, b on this machine")
    enc.add_argument("--params", default=None, metavar="JSON", help="read parameters saved with --save")
    enc.add_argument("--save", default=None, metavar="JSON", help="write the parameters to this JSON file")
    for name, text in (("e", "encoding s/byte"), ("r", "read s/byte"), ("w", "write s/byte"),
                       ("a", "network latency s"), ("b", "network s/byte")):
        enc.add_argument(f"--{name}", default=None, help=f"{text} (overrides measured or saved value)")
    enc.add_argument("--size", default="64MiB", help="checkpoint sizes per rank, comma-separated")
    enc.add_argument("--group-size", default="4,8,16", help="group sizes, comma-separated (default 4,8,16)")
    enc.add_argument("--block-size", default="1MiB", help="block size z (default 1MiB)")
    enc.add_argument("--dir", default=None, help="directory for the file read/write measurement")
    enc.add_argument("--timeout", default="120s", help="hard timeout of the MPI ping-pong (default 120s)")
    enc.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                     help="timer of the codec and file measurements: wall-clock (default) or this process's "
                          "CPU time (steadier when other jobs load the machine)")
    enc.add_argument("--json", action="store_true", help="print JSON instead of a table")
    enc.set_defaults(func=run_encoding)

    itv = sub.add_parser(
        "interval", help="optimal checkpoint interval (Young, Daly) and expected waste",
        description="Optimal compute time between checkpoints from the checkpoint cost and the MTBF: Young "
                    "(sqrt(2·C·M)) and Daly's higher-order estimate, with the expected waste fraction.")
    itv.add_argument("--cost", required=True, help="time to take one checkpoint, e.g. 12s")
    itv.add_argument("--mtbf", required=True, help="mean time between failures, e.g. 6h")
    itv.add_argument("--restart", default="0s", help="restart time after a failure (default 0s)")
    itv.add_argument("--json", action="store_true", help="print JSON instead of text")
    itv.set_defaults(func=run_interval)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _parse_int(text: str, name: str, minimum: int = 0) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ModelError(f"{name} {text!r} is not an integer") from None
    if value < minimum:
        raise ModelError(f"{name} = {value} must be >= {minimum}")
    return value


def _parse_list(text: str, name: str, parse) -> list:  # type: ignore[no-untyped-def]
    items = [item.strip() for item in str(text).split(",") if item.strip()]
    if not items:
        raise ModelError(f"{name} is empty: give comma-separated values")
    return [parse(item) for item in items]


def run_reliability(args: argparse.Namespace) -> int:
    """Carry out ``ftkit model reliability``; return the exit code."""
    from ..models.compare import compare_conditional, compare_schemes, format_conditional, format_table
    from ..models.failures import default_scenarios, load_failures
    from ..models.reliability import get_scheme

    nodes = _parse_int(args.nodes, "--nodes", 1)
    sizes = _parse_list(args.group_sizes, "--group-sizes", lambda s: _parse_int(s, "group size", 2))
    scheme_text = args.schemes if args.tolerance is None else f"t={_parse_int(args.tolerance, '--tolerance')}"
    schemes = _parse_list(scheme_text, "--schemes", get_scheme)
    if args.failed is not None:
        if args.plot or args.failures:
            raise ModelError("--failed X prints Pr(x_Ct | x = X): it cannot be combined with "
                             "--plot or --failures")
        failed = _parse_int(args.failed, "--failed")
        trials = _parse_int(args.trials, "--trials")
        seed = None if args.seed is None else _parse_int(args.seed, "--seed")
        rows = compare_conditional(nodes, sizes, failed, schemes, trials=trials, seed=seed)
        if args.json:
            print(json.dumps([r.__dict__ for r in rows]))
        else:
            print(f"Pr(x_Ct | x = {failed}) for n = {nodes} nodes")
            print(format_conditional(rows))
        return 0
    if args.plot:
        from ..models.plot import require_matplotlib

        require_matplotlib()  # before the computation, not after it
    scenarios = [load_failures(args.failures)] if args.failures else default_scenarios()
    results = compare_schemes(nodes, sizes, scenarios, schemes)
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))
    else:
        print(f"Catastrophic failure probability per failure event (eq. 3), n = {nodes} nodes")
        print(format_table(results))
    if args.plot:
        from ..models.plot import plot_comparison

        path = plot_comparison(results, args.plot, nodes=nodes)
        print(f"plot written to {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def run_interval(args: argparse.Namespace) -> int:
    """Carry out ``ftkit model interval``; return the exit code."""
    from ..models.interval import daly_interval, expected_waste, young_interval

    cost = parse_duration(args.cost, name="--cost")
    mtbf = parse_duration(args.mtbf, name="--mtbf")
    restart = parse_duration(args.restart, name="--restart")
    young, daly = young_interval(cost, mtbf), daly_interval(cost, mtbf)
    result = {
        "cost_s": cost, "mtbf_s": mtbf, "restart_s": restart,
        "young_s": young, "young_waste": expected_waste(young, cost, mtbf, restart),
        "daly_s": daly, "daly_waste": expected_waste(daly, cost, mtbf, restart),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"checkpoint cost {format_duration(cost)}, MTBF {format_duration(mtbf)}, "
          f"restart {format_duration(restart)}")
    for name, value in (("Young", young), ("Daly", daly)):
        waste = result[f"{name.lower()}_waste"]
        print(f"{name + ' interval:':<16} {value:10.1f} s ({format_duration(value)}), "
              f"expected waste {waste:.2%}")
    if cost >= 2 * mtbf:
        print("note: cost >= 2·MTBF, Daly's estimate is the MTBF itself; checkpointing barely pays off")
    return 0


def _float_param(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ModelError(f"--{name} {text!r} is not a number (seconds or seconds per byte)") from None
    if not value >= 0:
        raise ModelError(f"--{name} = {text} must be >= 0")
    return value


def run_encoding(args: argparse.Namespace) -> int:
    """Carry out ``ftkit model encoding``; return the exit code."""
    from ..models.encoding import EncodingModel

    sizes = _parse_list(args.size, "--size", lambda s: parse_size(s, name="--size"))
    groups = _parse_list(args.group_size, "--group-size", lambda s: _parse_int(s, "group size", 1))
    block = parse_size(args.block_size, name="--block-size")
    params: dict[str, float] = {}
    measured = None
    if args.params:
        params.update(_read_params(Path(args.params)))
    if args.measure:
        from ..models.measure import measure_model

        measured = measure_model(block_size=block, directory=args.dir,
                                 timeout=parse_duration(args.timeout, name="--timeout"),
                                 clock=time.perf_counter if args.clock == "wall" else time.process_time)
        params.update(measured.model.to_dict())
    for name in ("e", "r", "w", "a", "b"):
        value = getattr(args, name)
        if value is not None:
            params[name] = _float_param(value, name)
    if "e" not in params:
        raise ModelError("no encoding parameters: pass --measure, --params FILE (saved with --save) "
                         "or at least --e")
    model = EncodingModel(e=params["e"], r=params.get("r", 0.0), w=params.get("w", 0.0),
                          a=params.get("a", 0.0), b=params.get("b", 0.0), block_size=block)
    if args.save:
        try:
            Path(args.save).write_text(json.dumps(model.to_dict(), indent=1) + "\n", encoding="utf-8")
        except OSError as exc:
            raise ModelError(f"cannot write {args.save}: {exc.strerror or exc}") from exc
    rows = [{"size": s, "group_size": k, "eq1_s": model.predict(s, k),
             "eq1_local_s": model.predict(s, k, network=False), "eq2_s": model.predict_simplified(s, k)}
            for s in sizes for k in groups]
    if args.json:
        print(json.dumps({"model": model.to_dict(), "predictions": rows,
                          "measurements": None if measured is None else measured.raw}))
        return 0
    p = model.to_dict()
    print(f"model parameters (z = {format_size(model.block_size)}):")
    print(f"  e = {p['e']:.4e} s/byte  (encoding, {_rate(p['e'])} per data block)")
    print(f"  r = {p['r']:.4e} s/byte  (read, {_rate(p['r'])})")
    print(f"  w = {p['w']:.4e} s/byte  (write, {_rate(p['w'])})")
    print(f"  a = {p['a']:.4e} s       (network latency)")
    print(f"  b = {p['b']:.4e} s/byte  (network, {_rate(p['b'])})")
    print(f"{'size':>10} {'k':>3} {'eq.(1) s':>10} {'eq.(1) no net':>14} {'eq.(2) s':>10}")
    for row in rows:
        print(f"{format_size(row['size']):>10} {row['group_size']:>3} {row['eq1_s']:>10.3f} "
              f"{row['eq1_local_s']:>14.3f} {row['eq2_s']:>10.3f}")
    return 0


def _rate(seconds_per_byte: float) -> str:
    return "inf" if seconds_per_byte == 0 else f"{1 / seconds_per_byte / 2**20:.0f} MiB/s"


def _read_params(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read encoding parameters from {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{path} must hold a JSON object with keys e, r, w, a, b (write it with --save)")
    out = {}
    for key in ("e", "r", "w", "a", "b"):
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ModelError(f"{path}: {key} must be a number, got {value!r}")
            out[key] = float(value)
    return out
