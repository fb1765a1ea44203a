"""The ``ftkit`` command: one subcommand per module, each owning its parser.

Each module listed in ``_SUBCOMMAND_MODULES`` provides ``add_parser(subparsers)``, which registers its
subcommand(s) and sets ``func`` (called with the parsed arguments, returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .errors import FtkitError

__all__ = ["main"]

_SUBCOMMAND_MODULES = (
    "ftkit.launch_cli",         # launch
    "ftkit.doctor",             # doctor
    "ftkit.storage.cli",        # ls, verify, rebuild
    "ftkit.storage.export",     # export
    "ftkit.models.cli",         # model reliability|encoding|interval
    "ftkit.config_cli",         # config check
)


def build_parser() -> argparse.ArgumentParser:
    """Return the ``ftkit`` argument parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(prog="ftkit",
                                     description="ftkit: fault tolerance for MPI programs in Python")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ftkit`` command; return its exit code (errors print one line, exit code 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except FtkitError as exc:
        print(f"ftkit {args.command}: error: {exc}", file=sys.stderr)
        return 2
