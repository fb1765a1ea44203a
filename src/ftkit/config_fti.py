"""FTI 1.6's configuration keys and INI rules, as FTI reads them (its ``src/conf.c`` and ``iniparser``).

This module holds the key table (section, spelling in the file, type, allowed values, what ftkit does with
the key) and the INI reader. :mod:`ftkit.config` builds and validates a :class:`~ftkit.config.Config` from
them; ``ftkit config check`` prints them.

FTI's parser rules, kept here:

* Section and key names are case-insensitive (``[Basic]``, ``Ckpt_L1``).
* A line whose first non-blank character is ``#`` or ``;`` is a comment; an unquoted value ends at the first
  ``#`` or ``;`` (an inline comment); a value in double or single quotes is taken as is (``""`` is empty);
  a line ending in ``\\`` continues on the next line.
* A repeated key keeps its last value (ftkit warns, naming both lines); an empty value means the key's
  default (ftkit warns, except where the default itself is empty, as for ``exec_id``).
* A key or section FTI does not read is ignored (ftkit warns, naming the closest known key).
* A line that is neither a section, a ``key = value`` nor a comment is a syntax error (FTI refuses the file
  too).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["KeySpec", "KEYS", "INI_NAMES", "IniEntry", "read_ini", "closest_key", "lookup", "parse_entries",
           "parse_value", "describe", "key_status"]

_BOOL = (0, 1)
_TAG = {"low": 0, "high": 2**31 - 1}
_NONNEG = {"low": 0, "high": None}


@dataclass(frozen=True)
class KeySpec:
    """One configuration key.

    ``kind`` is ``int``, ``flag`` (an integer 0|1, read by FTI with ``iniparser_getint``), ``bool`` (FTI's
    ``iniparser_getboolean``: ``1/0``, ``y/n``, ``yes/no``, ``t/f``, ``true/false``), ``float``, ``str`` or
    ``path``. ``allowed`` is a tuple of allowed values or a ``{"low", "high"}`` range (``high`` None =
    unbounded, ``open_low`` = strict). ``meaning`` says what ftkit does with the key; ``ignored_unless``,
    when set, lists the values ftkit honours: any other value (or, for ``()``, any value) is ignored, and
    ``instead`` says what ftkit does instead. ``needs`` names the key that must be non-zero for this key to
    matter at all (FTI's injection keys need ``number``, the dCP details need ``enable_dcp``).
    """

    name: str
    section: str
    ini: str
    kind: str
    allowed: Any
    meaning: str
    ignored_unless: tuple[Any, ...] | None = None
    instead: str = ""
    needs: str = ""


def _k(name: str, section: str, kind: str, allowed: Any, meaning: str, *, ini: str | None = None,
       ignored_unless: tuple[Any, ...] | None = None, instead: str = "", needs: str = "") -> KeySpec:
    return KeySpec(name, section, ini or name, kind, allowed, meaning, ignored_unless, instead, needs)


_TAG_NOTE = "ftkit uses its own MPI tags and communicators"
_LUSTRE_NOTE = "ftkit writes with plain POSIX I/O and sets no Lustre striping"
_INJ_NOTE = "FTI's built-in injection is not implemented: no faults are injected (use ftkit.inject)"
_H5_NOTE = ("HDF5 single-file export is not implemented by ftkit; checkpoints are written as POSIX files "
            "only")

#: Every key ftkit reads, in FTI's order. ``name`` is the :class:`~ftkit.config.Config` attribute.
KEYS: tuple[KeySpec, ...] = (
    _k("head", "basic", "flag", _BOOL, "1: the first rank of each node is a dedicated head that does the "
       "post-processing of the levels with inline_lN = 0"),
    _k("node_size", "basic", "int", _NONNEG, "ranks per node, head included (0: detect from the hosts); "
       "with all ranks on one host, nodes of node_size consecutive ranks are emulated"),
    _k("ckpt_dir", "basic", "path", None, "node-local root (L1, L2, L3 files), node i in ckpt_dir/node<i>"),
    _k("glbl_dir", "basic", "path", None, "global (parallel file system) root of L4 checkpoints"),
    _k("meta_dir", "basic", "path", None, "metadata (manifest) directory"),
    _k("ckpt_l1", "basic", "int", _NONNEG, "L1 (local write) interval for snapshot(); 0 = off"),
    _k("ckpt_l2", "basic", "int", _NONNEG, "L2 (partner copy) interval for snapshot(); 0 = off"),
    _k("ckpt_l3", "basic", "int", _NONNEG, "L3 (erasure code) interval for snapshot(); 0 = off"),
    _k("ckpt_l4", "basic", "int", _NONNEG, "L4 (global file system) interval for snapshot(); 0 = off"),
    _k("dcp_l4", "basic", "int", _NONNEG, "interval of differential L4 checkpoints for snapshot() "
       "(needs enable_dcp = 1; L4 is due at the multiples of ckpt_l4 and of dcp_l4); 0 = off"),
    _k("inline_l2", "basic", "flag", _BOOL, "1: the checkpoint call does the L2 work; 0: in the background"),
    _k("inline_l3", "basic", "flag", _BOOL, "1: the checkpoint call does the L3 work; 0: in the background"),
    _k("inline_l4", "basic", "flag", _BOOL, "1: the checkpoint call does the L4 work; 0: in the background"),
    _k("h5_single_file_inline", "basic", "bool", _BOOL, "HDF5 single-file export inline",
       ignored_unless=(), instead=_H5_NOTE, needs="h5_single_file_enable"),
    _k("enable_staging", "basic", "bool", _BOOL, "FTI's file staging", ignored_unless=(0,),
       instead="staging is not implemented by ftkit; no files are staged"),
    _k("keep_heads_alive", "basic", "bool", _BOOL, "keep FTI's heads alive after finalize",
       ignored_unless=(0,), instead="ftkit's heads return from Checkpointer at finalize()"),
    _k("enable_dcp", "basic", "bool", _BOOL, "1: differential L4 checkpoints (ftkit's dCP, xxh3-128 "
       "block hashes; every L4 write is differential, a new full generation when the block store grows)"),
    _k("dcp_mode", "basic", "int", {"low": 0, "high": 31}, "dCP hash function", needs="enable_dcp",
       ignored_unless=(), instead="ftkit's dCP always hashes blocks with xxh3-128"),
    _k("dcp_block_size", "basic", "int", {"low": 512, "high": 64 * 2**20},
       "dCP block size in bytes (-1, FTI's 'unset': 16384)"),
    _k("dcp_stack_size", "basic", "int", {"low": 1, "high": None}, "FTI's dCP layer stack depth",
       ignored_unless=(), instead="ftkit's dCP starts a new full generation when its block store grows "
       "past a fixed multiple of the content", needs="enable_dcp"),
    _k("max_var_id", "basic", "int", _NONNEG, "FTI's largest protected-variable id", ignored_unless=(),
       instead="ftkit has no limit on the number of protected arrays"),
    _k("cacheddcp", "basic", "flag", _BOOL, "FTI's cached POSIX dCP", needs="enable_dcp",
       ignored_unless=(0,), instead="ftkit's dCP reads the rank's L1 file; it keeps no cached copy"),
    _k("verbosity", "basic", "int", (1, 2, 3), "level of ftkit's event log (logger 'ftkit'): 1 debug, "
       "2 info (one line per checkpoint, recovery and failure, on rank 0), 3 warnings and errors only"),
    _k("keep_last_ckpt", "basic", "flag", _BOOL, "1: at finalize() the last checkpoint is made complete "
       "at L4 (flushed if needed), local files are removed, and a relaunch recovers from L4"),
    _k("keep_l4_ckpt", "basic", "bool", _BOOL, "1: every L4 checkpoint of the run is kept"),
    _k("ckpt_io", "basic", "int", (1, 2, 3, 4, 5, 6), "checkpoint I/O: 1 = POSIX", ignored_unless=(1,),
       instead="ftkit writes POSIX files only (2 MPI-IO, 3 FTI-FF, 4 SIONlib, 5 HDF5, 6 IME are not "
       "implemented): checkpoints are written as POSIX files"),
    _k("max_sync_intv", "basic", "int", _NONNEG, "most snapshot() calls between two agreements on the "
       "iteration time (0: 512)"),
    _k("group_size", "basic", "int", {"low": 1, "high": 64}, "nodes per L2/L3 group (L2/L3 need >= 2)"),
    _k("h5_single_file_dir", "basic", "str", None, "HDF5 single-file directory",
       needs="h5_single_file_enable", ignored_unless=(), instead=_H5_NOTE),
    _k("h5_single_file_prefix", "basic", "str", None, "HDF5 single-file name prefix",
       needs="h5_single_file_enable", ignored_unless=(), instead=_H5_NOTE),
    _k("h5_single_file_keep", "basic", "bool", _BOOL, "keep the HDF5 single file",
       needs="h5_single_file_enable", ignored_unless=(), instead=_H5_NOTE),
    _k("h5_single_file_enable", "basic", "bool", _BOOL, "HDF5 single-file export", ignored_unless=(0,),
       instead=_H5_NOTE),
    _k("enable_icp", "basic", "bool", _BOOL, "incremental checkpointing (later FTI versions)",
       ignored_unless=(0,), instead="incremental checkpointing is not implemented; ftkit takes whole "
       "checkpoints (use enable_dcp for differential L4)"),
    _k("failure", "restart", "int", (0, 1, 2, 3), "0: ftkit detects a restart from meta_dir; 1-3: a "
       "restart is expected"),
    _k("exec_id", "restart", "str", None, "identity of the run to restart, checked against meta_dir's "
       "manifest (a plain name; empty: the manifest's); a fresh start makes a new id", needs="failure"),
    _k("inj_rank", "injection", "int", _NONNEG, "FTI's bit-flip injection rank", ini="rank",
       ignored_unless=(), instead=_INJ_NOTE,
       needs="inj_number"),
    _k("inj_index", "injection", "int", _NONNEG, "FTI's bit-flip injection variable", ini="index",
       ignored_unless=(), instead=_INJ_NOTE,
       needs="inj_number"),
    _k("inj_position", "injection", "int", _NONNEG, "FTI's bit-flip position", ini="position",
       ignored_unless=(), instead=_INJ_NOTE,
       needs="inj_number"),
    _k("inj_number", "injection", "int", _NONNEG, "FTI's number of bit flips", ini="number",
       ignored_unless=(0,), instead=_INJ_NOTE),
    _k("inj_frequency", "injection", "int", {"low": -1, "high": None}, "FTI's injection frequency",
       ini="frequency", ignored_unless=(), instead=_INJ_NOTE,
       needs="inj_number"),
    _k("fast_forward", "advanced", "int", {"low": 1, "high": 10}, "snapshot() intervals are divided by "
       "fast_forward (1-10; 1 = as configured)"),
    _k("block_size", "advanced", "int", {"low": 1, "high": 2**20}, "FTI's L2/L3 message size in KiB",
       ignored_unless=(), instead="ftkit sizes its L2/L3 messages by transfer_size"),
    _k("transfer_size", "advanced", "int", {"low": 1, "high": 64}, "MiB per I/O chunk (bounds ftkit's "
       "extra memory per rank)"),
    _k("general_tag", "advanced", "int", _TAG, "MPI tag", ignored_unless=(), instead=_TAG_NOTE),
    _k("ckpt_tag", "advanced", "int", _TAG, "MPI tag", ignored_unless=(), instead=_TAG_NOTE),
    _k("stage_tag", "advanced", "int", _TAG, "MPI tag", ignored_unless=(), instead=_TAG_NOTE),
    _k("final_tag", "advanced", "int", _TAG, "MPI tag", ignored_unless=(), instead=_TAG_NOTE),
    _k("mpi_tag", "advanced", "int", _TAG, "MPI tag (older FTI)", ignored_unless=(), instead=_TAG_NOTE),
    _k("local_test", "advanced", "flag", _BOOL, "1: nodes emulated on one machine (node<i> directories)",
       ignored_unless=(1,), instead="ftkit always keeps node i's files in ckpt_dir/node<i>; it takes "
       "nodes from the hosts and emulates nodes of node_size ranks whenever all ranks share one host"),
    _k("gpu_host_bufsize", "advanced", "int", _NONNEG, "FTI's GPU staging buffer (bytes)",
       ignored_unless=(), instead="ftkit protects host (NumPy) memory only; no GPU buffer is used"),
    _k("lustre_striping_unit", "advanced", "int", _NONNEG, "Lustre striping", ignored_unless=(),
       instead=_LUSTRE_NOTE),
    _k("lustre_striping_factor", "advanced", "int", {"low": -1, "high": None}, "Lustre striping",
       ignored_unless=(), instead=_LUSTRE_NOTE),
    _k("lustre_striping_offset", "advanced", "int", {"low": -1, "high": None}, "Lustre striping",
       ignored_unless=(), instead=_LUSTRE_NOTE),
    _k("interval_unit", "ftkit", "str", ("minutes", "iterations"), "unit of ckpt_l1..ckpt_l4 and dcp_l4: "
       "minutes (FTI) or snapshot() calls"),
    _k("l3_code", "ftkit", "str", ("rs", "xor"), "L3 code: Reed-Solomon or XOR"),
    _k("mtbf", "ftkit", "float", {"low": 0.0, "high": None}, "job MTBF in seconds for snapshot(auto=True) "
       "(0 = unknown)"),
    _k("failure_timeout", "ftkit", "float", {"low": 0.0, "high": None, "open_low": True},
       "seconds any wait on a peer may take"),
    _k("group_access", "ftkit", "flag", _BOOL, "1: the group may read checkpoint files (0640/0750) for "
       "shared-group setups; 0: private to the user (0600/0700)"),
    _k("spare_ranks", "ftkit", "int", _NONNEG, "spare processes held for online recovery (the job's last N)"),
    _k("reserve_core", "ftkit", "flag", _BOOL, "1: the last core of each process's CPU set runs the "
       "checkpoint work (background thread, heads); the application's threads are pinned to the others"),
    _k("redundancy_sync", "ftkit", "str", ("background", "commit"), "when inline L2 partner copies and L3 "
       "parity files are fsynced: background (after the commit; the previous checkpoint is kept until they "
       "are durable) or commit (before it)"),
    _k("log_level", "ftkit", "str", ("", "debug", "info", "warning", "error", "off"), "level of ftkit's "
       "event log, overriding verbosity (empty: from verbosity; the environment's FTKIT_LOG overrides both)"),
    _k("compression", "ftkit", "str", ("none", "lz4", "zstd", "blosc"), "codec of the L4 copies "
       "(numcodecs, chunked, byte-shuffled; digests stay over the uncompressed bytes; with enable_dcp = 1 "
       "the dCP blocks are written instead)"),
    _k("compression_level", "ftkit", "int", {"low": 1, "high": 22}, "compression level (zstd 1-22, blosc "
       "1-9; lz4 ignores it)"),
    _k("exit_margin", "ftkit", "float", {"low": 0.0, "high": None}, "should_exit() turns true this many "
       "seconds before the job's end (0: twice the longest checkpoint seen, at least 60 s)"),
    _k("exit_level", "ftkit", "int", {"low": 1, "high": 4}, "level of the checkpoint taken when the job is "
       "asked to exit (halt, signal, end of the allocation)"),
    _k("end_time", "ftkit", "str", None, "end of the job's allocation: ISO 8601 with a zone or seconds since "
       "the epoch (default: from SLURM)"),
)

#: (section, spelling in the file) -> Config attribute. FTI's code spells the Lustre keys "stiping".
INI_NAMES: dict[tuple[str, str], str] = {(k.section, k.ini): k.name for k in KEYS}
INI_NAMES.update({("advanced", f"lustre_stiping_{x}"): f"lustre_striping_{x}"
                  for x in ("unit", "factor", "offset")})


@dataclass(frozen=True)
class IniEntry:
    """One ``key = value`` line: section and key (lower case), the value text, and its 1-based line."""

    section: str
    key: str
    value: str
    line: int


def _value_text(rest: str) -> str:
    """The value of ``key = rest`` by iniparser's rules: quoted as is, else up to an inline comment."""
    rest = rest.strip()
    for q in ('"', "'"):
        if rest.startswith(q) and q in rest[1:]:
            return rest[1:rest.index(q, 1)]
    for i, ch in enumerate(rest):
        if ch in "#;":
            return rest[:i].strip()
    return rest


def read_ini(text: str, source: str) -> list[IniEntry]:
    """Split FTI INI ``text`` into entries, in file order (see the module docstring for the rules).

    Raises
    ------
    ConfigError
        On a line that is neither a section, a ``key = value`` nor a comment (FTI refuses it too).
    """
    entries: list[IniEntry] = []
    section = ""
    pending, start = "", 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if pending:
            line, start = pending + line.lstrip(), start
        else:
            start = lineno
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        pending = ""
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        if s[0] == "[" and s[-1] == "]":
            section = s[1:-1].split("]")[0].strip().lower()
            continue
        if "=" not in s:
            raise ConfigError(f"{source}, line {start}: {s!r} is neither a [section], a 'key = value' nor "
                              "a comment: fix or remove the line (FTI refuses it too)")
        key, rest = s.split("=", 1)
        entries.append(IniEntry(section, key.strip().lower(), _value_text(rest), start))
    return entries


def closest_key(section: str, key: str) -> str:
    """Return the closest known ``[section] key`` to ``key`` (any section), or '' when none is close."""
    candidates = {f"[{s}] {k}": k for (s, k) in INI_NAMES}
    names = difflib.get_close_matches(key, sorted(set(candidates.values())), n=1, cutoff=0.6)
    if not names:
        return ""
    same = [c for c, k in candidates.items() if k == names[0] and c.startswith(f"[{section}] ")]
    return same[0] if same else min(c for c, k in candidates.items() if k == names[0])


_SPECS = {k.name: k for k in KEYS}
_SECTIONS = ("basic", "restart", "injection", "advanced", "ftkit")
_BOOL_WORDS = {"1": 1, "y": 1, "yes": 1, "t": 1, "true": 1, "0": 0, "n": 0, "no": 0, "f": 0, "false": 0}


def lookup(section: str, key: str) -> str | None:
    """Return the Config attribute of ``[section] key`` (ftkit's own keys also in ``[basic]``), or None."""
    name = INI_NAMES.get((section, key))
    if name is None and section == "basic" and key in _SPECS and _SPECS[key].section == "ftkit":
        name = key
    return name


def parse_entries(text: str, source: str, default_of: Callable[[str], Any],
                  ) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """Read INI ``text`` with FTI's rules into Config keyword values.

    Parameters
    ----------
    text, source
        The file's text and its name (for messages).
    default_of
        Returns a key's default (named in the note of an empty value).

    Returns
    -------
    values, lines, notes
        The parsed values by Config attribute (empty values left out, so the default applies), the line of
        each key the file sets, and the reader's notes (unknown, repeated and empty keys).

    Raises
    ------
    ConfigError
        On a syntax error or a value that is not of the key's type.
    """
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    notes: list[str] = []
    unknown_sections: set[str] = set()
    for e in read_ini(text, source):
        name = lookup(e.section, e.key)
        if name is None:
            if e.section and e.section not in _SECTIONS:
                if e.section not in unknown_sections:
                    unknown_sections.add(e.section)
                    close = difflib.get_close_matches(e.section, _SECTIONS, n=1, cutoff=0.6)
                    hint = f" (closest known section: [{close[0]}])" if close else ""
                    notes.append(f"line {e.line}: section [{e.section}] is not one FTI or ftkit reads{hint}: "
                                 "its keys are ignored")
                continue
            where = f"in [{e.section}]" if e.section else "outside any section"
            hint = closest_key(e.section, e.key)
            notes.append(f"line {e.line}: unknown key '{e.key}' {where} is ignored"
                         + (f" (closest known key: {hint})" if hint else ""))
            continue
        spec = _SPECS[name]
        if name in lines:
            notes.append(f"[{spec.section}] {e.key} is set twice (line {lines[name]} and line {e.line}): the "
                         f"last value, {e.value!r}, is used (as FTI does)")
        lines[name] = e.line
        if e.value == "":
            values.pop(name, None)
            default = default_of(name)
            if default != "":
                notes.append(f"line {e.line}: [{spec.section}] {e.key} is empty: the default, {default}, "
                             "is used")
            continue
        values[name] = parse_value(spec, e.value, source)
    return values, lines, notes


def parse_value(spec: KeySpec, raw: str, source: str) -> Any:
    """Convert the INI text of a key to the key's type (validation of the range is the Config's).

    Raises
    ------
    ConfigError
        If ``raw`` is not of the key's type (an interval that is not a number, a boolean that is not one).
    """
    where = f"{source}: [{spec.section}] {spec.ini} = {raw!r}"
    if spec.kind in ("int", "flag"):
        try:
            return int(raw, 10)
        except ValueError:
            try:
                return int(raw, 0)            # FTI reads integers with strtol(..., 0): 0x10 is 16
            except ValueError:
                raise ConfigError(f"{where} is not an integer; allowed: {describe(spec)}") from None
    if spec.kind == "bool":
        word = _BOOL_WORDS.get(raw.strip().lower())
        if word is None:
            raise ConfigError(f"{where} is not a boolean; allowed: 0 or 1 (also yes/no, true/false)")
        return word
    if spec.kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{where} is not a number; allowed: {describe(spec)}") from None
    lowered = ("interval_unit", "l3_code", "redundancy_sync", "log_level", "compression")
    return raw.strip().lower() if spec.name in lowered else raw


def describe(spec: KeySpec) -> str:
    """Say what values ``spec`` allows (for error messages)."""
    allowed, kind = spec.allowed, spec.kind
    if isinstance(allowed, tuple):
        return " or ".join(str(a) for a in allowed)
    if isinstance(allowed, dict):
        low, high = allowed["low"], allowed["high"]
        op = ">" if allowed.get("open_low") else ">="
        return f"{'a number' if kind == 'float' else 'an integer'} {op} {low}" + (
            f" and <= {high}" if high is not None else "")
    if kind == "path":
        return "a directory path ($VAR and ${VAR} are expanded)"
    return "a plain name: letters, digits, '.', '_' and '-' (at most 128), not '.' or '..'"


def key_status(config: Any, spec: KeySpec) -> tuple[str, str]:
    """Return ``(status, text)`` for ``spec``'s value in ``config``: ``("used", meaning)``,
    ``("ignored", what ftkit does instead)`` or ``("unused", why it does not matter)``."""
    if spec.needs and not getattr(config, spec.needs):
        need = _SPECS[spec.needs]
        return "unused", f"matters only with {need.ini} != 0 (as in FTI)"
    value = getattr(config, spec.name)
    if spec.ignored_unless is not None and value not in spec.ignored_unless:
        return "ignored", spec.instead
    if spec.ignored_unless and value == 0:
        return "used", f"off, as in FTI ({spec.meaning})"
    if spec.name == "dcp_l4" and config.dcp_l4 and not config.enable_dcp:
        return "ignored", "enable_dcp = 0, so no differential L4 checkpoint is taken (as FTI does)"
    return "used", spec.meaning
