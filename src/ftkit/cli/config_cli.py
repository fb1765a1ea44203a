"""``ftkit config check FILE``: how ftkit reads a configuration file, key by key.

For every ``key = value`` line of the file it prints the line, the value ftkit uses (paths expanded and made
absolute) and what ftkit does with it: ``used`` (and what for), ``ignored`` (accepted for FTI compatibility;
what ftkit does instead), ``unused`` (the key only matters with another key on, as in FTI) or ``unknown``
(not a key FTI or ftkit reads). Then the keys the file leaves to their defaults, the notes (the text of the
warning ftkit issues when the file is loaded) and the errors. Exit status 0 when the file loads (notes
allowed), 1 when it does not, 2 when it cannot be read. With ``--json``, the same as one JSON object
(docs/cli.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any, TextIO

from ..config import Config, check_value
from ..config_fti import KEYS, key_status, lookup, parse_value, read_ini
from ..errors import ConfigError

__all__ = ["add_parser", "run_check", "check_config"]

_SPECS = {k.name: k for k in KEYS}


def add_parser(subparsers: Any) -> None:
    """Register ``config`` and its sub-subcommand ``check``."""
    config = subparsers.add_parser(
        "config", help="configuration tools (check how ftkit reads an FTI/ftkit INI file)",
        description="Configuration tools. ftkit reads FTI's INI files with FTI's keys and parser rules.")
    sub = config.add_subparsers(dest="config_command", metavar="CONFIG_COMMAND")
    config.set_defaults(func=lambda args: _help(config))
    check = sub.add_parser(
        "check", help="print how ftkit reads FILE, key by key; exit 1 on errors",
        description="Print how ftkit reads an FTI or ftkit configuration file, key by key: the value ftkit "
                    "uses, and whether ftkit uses it (and for what), ignores it (and what it does instead), "
                    "or does not need it; then the defaults, warnings and errors. Run this first with an "
                    "FTI configuration. Exit status: 0 if the file loads (warnings allowed), 1 if not, 2 "
                    "if it cannot be read.")
    check.add_argument("file", metavar="FILE", help="the INI file (FTI's .fti/.ini or ftkit's)")
    check.add_argument("--no-defaults", action="store_true",
                       help="do not list the keys the file leaves to their defaults")
    check.add_argument("--json", action="store_true",
                       help="print one JSON object instead of text (docs/cli.md)")
    check.set_defaults(func=run_check)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_check(args: argparse.Namespace) -> int:
    """Entry point of ``ftkit config check``; return the exit status."""
    return check_config(Path(args.file), out=sys.stdout, defaults=not args.no_defaults, as_json=args.json)


def check_config(path: Path, out: TextIO, defaults: bool = True, as_json: bool = False) -> int:
    """Print how ftkit reads the configuration file ``path`` to ``out`` (as text, or one JSON object with
    ``as_json``); return 0 if it loads, 1 if it does not, 2 if it cannot be read.

    Length: one report, each fact recorded for ``--json`` beside the line that prints it.
    """
    report: dict[str, Any] = {"command": "config check", "file": str(path), "loads": False, "keys": [],
                              "defaults": [], "warnings": [], "errors": []}

    def say(line: str = "") -> None:
        if not as_json:
            print(line, file=out)

    def done(code: int) -> int:
        if as_json:
            print(json.dumps({**report, "exit_code": code}), file=out)
        return code

    say(f"ftkit config check: {path}")
    try:
        text = path.read_text()
        entries = read_ini(text, str(path))
    except (OSError, UnicodeDecodeError, ConfigError) as exc:
        report["errors"].append(str(exc) if isinstance(exc, ConfigError) else f"cannot read {path}: {exc}")
        say(f"error: {report['errors'][0]}")
        say("result: the file does not load (1 error)")
        return done(2 if isinstance(exc, OSError) else 1)
    errors: list[str] = []
    config: Config | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            config = Config.from_string(text, source=str(path))
        except ConfigError as exc:
            errors.append(str(exc))
    last = {lookup(e.section, e.key): e.line for e in entries}
    say("keys in the file (line, key = value ftkit uses: what ftkit does with it):")
    for e in entries:
        name = lookup(e.section, e.key)
        head = f"  {e.line:4d}  [{e.section or '-'}] {e.key} = {e.value}"
        key = {"line": e.line, "section": e.section, "key": e.key, "value": e.value, "name": name,
               "uses": None}
        report["keys"].append(key)
        if name is None:
            key.update(status="unknown", what="not a key FTI or ftkit reads; ignored")
        elif last[name] != e.line:
            key.update(status="repeated", what=f"overridden by line {last[name]}")
        elif config is None:
            problem = _key_error(name, e.value, str(path))
            key.update(status="error" if problem else "valid", what=problem)
            say(f"{head}\n        {'ERROR: ' + problem if problem else 'valid'}")
            continue
        else:
            value = getattr(config, name)
            key["uses"] = str(value)
            key["status"], key["what"] = key_status(config, _SPECS[name])
            shown = "" if str(value) == e.value else f"  (ftkit uses {value})"
            say(f"{head}{shown}\n        {key['status']}: {key['what']}")
            continue
        say(f"{head}\n        {key['status']}: {key['what']}")
    if config is not None and defaults:
        say("keys the file leaves to their defaults:")
        for spec in KEYS:
            if spec.name in last:
                continue
            status, what = key_status(config, spec)
            if status == "used":
                report["defaults"].append({"section": spec.section, "key": spec.ini,
                                           "uses": str(getattr(config, spec.name)), "what": what})
                say(f"        [{spec.section}] {spec.ini} = {getattr(config, spec.name)}: {what}")
    notes = config.notes if config is not None else ()
    report.update(loads=config is not None, warnings=list(notes), errors=errors)
    if notes:
        say(f"warnings ({len(notes)}), issued as one ConfigWarning when the file is loaded:")
        for n in notes:
            say(f"  - {n}")
    if errors:
        say(f"errors ({len(errors)}):")
        for err in errors:
            say(f"  - {err}")
        say("result: the file does not load")
        return done(1)
    say(f"result: the file loads ({len(notes)} warning(s))")
    return done(0)


def _key_error(name: str, raw: str, source: str) -> str:
    """The error of one key's value on its own, or '' when the value is valid by itself."""
    if raw == "":
        return ""
    try:
        check_value(name, parse_value(_SPECS[name], raw, source), source)
    except ConfigError as exc:
        return str(exc)
    return ""
