"""``ftkit SUBCOMMAND`` imports only that subcommand's module (start-up time of every ``ftkit launch``)."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from ftkit.cli import _SUBCOMMAND_MODULES, build_parser


def _registered(parser: argparse.ArgumentParser) -> set[str]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(actions[0].choices)


@pytest.mark.parametrize("module", sorted(_SUBCOMMAND_MODULES))
def test_each_module_registers_exactly_its_listed_subcommands(module):
    parser = argparse.ArgumentParser()
    importlib.import_module(module).add_parser(parser.add_subparsers(dest="command"))
    assert _registered(parser) == set(_SUBCOMMAND_MODULES[module])


def test_a_named_subcommand_builds_only_its_parser_and_no_name_builds_all():
    every = {c for commands in _SUBCOMMAND_MODULES.values() for c in commands}
    assert _registered(build_parser()) == every
    assert _registered(build_parser("--help")) == every
    assert _registered(build_parser("nosuchcommand")) == every
    assert _registered(build_parser("verify")) == {"ls", "verify", "rebuild", "export"}
    assert _registered(build_parser("launch")) == {"launch", "job-status"}


def test_launch_imports_neither_numpy_nor_mpi_nor_other_subcommands():
    code = ("import sys; from ftkit.cli import main; main(['launch', '-n', '2', '--dry-run', '--', 'true']); "
            "print(sorted(m for m in ('numpy', 'mpi4py.MPI', 'ftkit.cli.storage_cli', "
            "'ftkit.storage.export', 'ftkit.cli.models_cli', 'ftkit.cli.doctor', 'ftkit.checkpoint') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    lines = out.stdout.strip().splitlines()
    assert "-n 2" in lines[0]
    assert lines[-1] == "[]", out.stdout
