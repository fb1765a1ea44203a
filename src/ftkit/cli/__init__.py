"""The ``ftkit`` command: one subcommand per module, each owning its parser, all in this package
(``launch_cli``, ``storage_cli``: ``ls``/``verify``/``rebuild``/``export``, ``jobctl_cli``: ``halt`` and
``flush``, ``models_cli``, ``config_cli``, ``doctor``).

Each module listed in ``_SUBCOMMAND_MODULES`` provides ``add_parser(subparsers)``, which registers its
subcommand(s) and sets ``func`` (called with the parsed arguments, returning the exit code). A command line
naming a subcommand imports only that subcommand's module (``ftkit launch`` does not import the storage,
export and model modules and numpy with them: 0.2 s of every launch); ``ftkit`` alone or ``--help`` imports
them all.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from ..errors import FtkitError

__all__ = ["main"]

#: module -> the subcommands its ``add_parser`` registers (tests/test_cli_lazy.py checks the two agree).
_SUBCOMMAND_MODULES = {
    "ftkit.cli.launch_cli": ("launch", "job-status"),
    "ftkit.cli.doctor": ("doctor",),
    "ftkit.cli.storage_cli": ("ls", "verify", "rebuild", "export"),
    "ftkit.cli.jobctl_cli": ("halt", "flush"),
    "ftkit.cli.models_cli": ("model",),        # model reliability|encoding|interval
    "ftkit.cli.config_cli": ("config",),       # config check
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Return the ``ftkit`` argument parser: with only the module of subcommand ``command`` registered if it
    is a known one, else with every subcommand."""
    parser = argparse.ArgumentParser(prog="ftkit",
                                     description="ftkit: fault tolerance for MPI programs in Python")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [name for name, commands in _SUBCOMMAND_MODULES.items() if command in commands]
    for name in modules or _SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ftkit`` command; return its exit code (errors print one line, exit code 2; with ``--json``
    also ``{"command": ..., "error": ..., "exit_code": 2}`` on standard output)."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_in[0] if args_in else None)
    args = parser.parse_args(args_in)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except FtkitError as exc:
        print(f"ftkit {args.command}: error: {exc}", file=sys.stderr)
        if getattr(args, "json", False):  # a script reading stdout gets the error too
            print(json.dumps({"command": args.command, "error": str(exc), "exit_code": 2}))
        return 2
