"""ftkit's configuration: FTI's INI file, with its keys as they are, plus a few keys of ftkit's own.

A configuration is a :class:`Config` (a validated dataclass). It is read from an INI file with
:meth:`Config.from_file` (or :meth:`Config.from_string`), or built directly with keyword arguments. Every key
is checked: an unknown key, a value of the wrong type or an impossible value raises :class:`ConfigError`
naming the key, the value and what is allowed.

Sections and keys (FTI's meaning and units):

``[basic]``
    ``head`` (0|1), ``node_size`` (ranks per node; 0 = detect), ``group_size`` (nodes per L3 group, >= 2),
    ``ckpt_dir`` (node-local root), ``glbl_dir`` (parallel file system), ``meta_dir`` (metadata),
    ``ckpt_l1``..``ckpt_l4`` (checkpoint interval per level, in minutes, or in ``snapshot()`` calls with
    ``interval_unit = iterations``; 0 = off), ``inline_l2``..``inline_l4`` (1 = the checkpoint call does that
    level's work, 0 = it runs in the background), ``keep_last_ckpt`` (0|1), ``keep_l4_ckpt`` (0|1),
    ``verbosity`` (1 debug, 2 info, 3 warnings only), ``ckpt_io`` (1 = POSIX; the only one ftkit implements),
    ``enable_dcp`` (0|1, differential L4), ``dcp_block_size`` (bytes), ``dcp_mode``, ``dcp_stack_size``,
    ``max_sync_intv`` (snapshot calls between clock agreements; 0 = automatic), ``enable_staging``,
    ``enable_icp`` (accepted only as 0: not implemented).
``[restart]``
    ``failure`` (0 = let ftkit detect a restart from ``meta_dir``; 1, 2 or 3 = a restart is expected),
    ``exec_id`` (identity of the run; empty = new id on a fresh start, taken from the metadata on restart).
``[injection]``
    ``rank``, ``number``, ``position``, ``frequency``: accepted for FTI compatibility; only ``number = 0``
    (use :mod:`ftkit.inject` to inject faults).
``[advanced]``
    ``block_size`` (KiB per message in L2/L3 transfers), ``transfer_size`` (MiB per I/O chunk, <= 64, which
    bounds ftkit's extra memory), ``local_test`` (0|1), ``general_tag``, ``ckpt_tag``, ``stage_tag``,
    ``final_tag``, ``mpi_tag``, ``lustre_striping_unit``, ``lustre_striping_factor``,
    ``lustre_striping_offset`` (accepted, unused).
``[ftkit]`` (also accepted in ``[basic]``)
    ``interval_unit`` (``minutes`` | ``iterations``), ``l3_code`` (``rs`` | ``xor``), ``mtbf`` (seconds, for
    the automatic interval; 0 = unknown), ``failure_timeout`` (seconds any wait on a peer may take, > 0).

Relative directories are resolved against the current working directory when the configuration is built.
"""

from __future__ import annotations

import configparser
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["Config", "load_config", "KEY_SECTIONS"]

_BOOL = (0, 1)
_EXEC_ID_RE = re.compile(r"^[A-Za-z0-9._-]{0,128}$")

# key -> (section, kind, constraint). kind: int | float | str | path. The constraint is a tuple of allowed
# values, or a (low, high) range given as a dict (high None = unbounded).
_SPEC: dict[str, tuple[str, str, Any]] = {
    "head": ("basic", "int", _BOOL),
    "node_size": ("basic", "int", {"low": 0, "high": None}),
    "group_size": ("basic", "int", {"low": 2, "high": 64}),
    "ckpt_dir": ("basic", "path", None),
    "glbl_dir": ("basic", "path", None),
    "meta_dir": ("basic", "path", None),
    "ckpt_l1": ("basic", "int", {"low": 0, "high": None}),
    "ckpt_l2": ("basic", "int", {"low": 0, "high": None}),
    "ckpt_l3": ("basic", "int", {"low": 0, "high": None}),
    "ckpt_l4": ("basic", "int", {"low": 0, "high": None}),
    "inline_l2": ("basic", "int", _BOOL),
    "inline_l3": ("basic", "int", _BOOL),
    "inline_l4": ("basic", "int", _BOOL),
    "keep_last_ckpt": ("basic", "int", _BOOL),
    "keep_l4_ckpt": ("basic", "int", _BOOL),
    "verbosity": ("basic", "int", (1, 2, 3)),
    "ckpt_io": ("basic", "int", (1,)),
    "enable_dcp": ("basic", "int", _BOOL),
    "dcp_mode": ("basic", "int", {"low": 0, "high": 31}),
    "dcp_block_size": ("basic", "int", {"low": 512, "high": 64 * 2**20}),
    "dcp_stack_size": ("basic", "int", {"low": 1, "high": None}),
    "max_sync_intv": ("basic", "int", {"low": 0, "high": None}),
    "enable_staging": ("basic", "int", (0,)),
    "enable_icp": ("basic", "int", (0,)),
    "failure": ("restart", "int", (0, 1, 2, 3)),
    "exec_id": ("restart", "str", None),
    "inj_rank": ("injection", "int", {"low": 0, "high": None}),
    "inj_number": ("injection", "int", (0,)),
    "inj_position": ("injection", "int", {"low": 0, "high": None}),
    "inj_frequency": ("injection", "int", {"low": 0, "high": None}),
    "block_size": ("advanced", "int", {"low": 1, "high": 2**20}),
    "transfer_size": ("advanced", "int", {"low": 1, "high": 64}),
    "local_test": ("advanced", "int", _BOOL),
    "general_tag": ("advanced", "int", {"low": 0, "high": 2**31 - 1}),
    "ckpt_tag": ("advanced", "int", {"low": 0, "high": 2**31 - 1}),
    "stage_tag": ("advanced", "int", {"low": 0, "high": 2**31 - 1}),
    "final_tag": ("advanced", "int", {"low": 0, "high": 2**31 - 1}),
    "mpi_tag": ("advanced", "int", {"low": 0, "high": 2**31 - 1}),
    "lustre_striping_unit": ("advanced", "int", {"low": 0, "high": None}),
    "lustre_striping_factor": ("advanced", "int", {"low": -1, "high": None}),
    "lustre_striping_offset": ("advanced", "int", {"low": -1, "high": None}),
    "interval_unit": ("ftkit", "str", ("minutes", "iterations")),
    "l3_code": ("ftkit", "str", ("rs", "xor")),
    "mtbf": ("ftkit", "float", {"low": 0.0, "high": None}),
    "failure_timeout": ("ftkit", "float", {"low": 0.0, "high": None, "open_low": True}),
}

#: Section of every key ftkit reads (FTI's sections; ftkit's own keys live in ``[ftkit]``).
KEY_SECTIONS: dict[str, str] = {k: v[0] for k, v in _SPEC.items()}

# [injection] keys are spelled without the prefix in the file.
_INI_NAME = {"inj_rank": "rank", "inj_number": "number", "inj_position": "position",
             "inj_frequency": "frequency"}
_FROM_INI = {(s, _INI_NAME.get(k, k)): k for k, (s, _, _) in _SPEC.items()}
_UNSUPPORTED_HINT = {
    "ckpt_io": "ftkit writes POSIX files only (1); 2 = MPI-IO, 3 = FTI-FF, 4 = SIONlib, 5 = HDF5 are not "
               "implemented",
    "enable_staging": "staging is not implemented by ftkit",
    "enable_icp": "incremental checkpointing is not implemented by ftkit; use enable_dcp",
    "inj_number": "FTI's built-in injection is not implemented; use ftkit.inject",
}


@dataclass(frozen=True)
class Config:
    """A validated ftkit/FTI configuration (see the module docstring for every key, its unit and meaning).

    Raises
    ------
    ConfigError
        On construction, if any value is of the wrong type or outside what is allowed.
    """

    head: int = 0
    node_size: int = 0
    group_size: int = 4
    ckpt_dir: Path = field(default=Path("ftkit-local"))
    glbl_dir: Path = field(default=Path("ftkit-global"))
    meta_dir: Path = field(default=Path("ftkit-meta"))
    ckpt_l1: int = 0
    ckpt_l2: int = 0
    ckpt_l3: int = 0
    ckpt_l4: int = 0
    inline_l2: int = 1
    inline_l3: int = 1
    inline_l4: int = 1
    keep_last_ckpt: int = 0
    keep_l4_ckpt: int = 0
    verbosity: int = 2
    ckpt_io: int = 1
    enable_dcp: int = 0
    dcp_mode: int = 0
    dcp_block_size: int = 16384
    dcp_stack_size: int = 5
    max_sync_intv: int = 0
    enable_staging: int = 0
    enable_icp: int = 0
    failure: int = 0
    exec_id: str = ""
    inj_rank: int = 0
    inj_number: int = 0
    inj_position: int = 0
    inj_frequency: int = 0
    block_size: int = 1024
    transfer_size: int = 16
    local_test: int = 1
    general_tag: int = 2612
    ckpt_tag: int = 711
    stage_tag: int = 406
    final_tag: int = 3107
    mpi_tag: int = 2612
    lustre_striping_unit: int = 4194304
    lustre_striping_factor: int = -1
    lustre_striping_offset: int = -1
    interval_unit: str = "minutes"
    l3_code: str = "rs"
    mtbf: float = 0.0
    failure_timeout: float = 300.0
    source: str = field(default="<defaults>", compare=False)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "source":
                continue
            value = _check(f.name, getattr(self, f.name), self.source)
            object.__setattr__(self, f.name, value)

    # -- construction -------------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **overrides: Any) -> Config:
        """Read an FTI-style INI file; ``overrides`` replace keys after reading.

        Raises
        ------
        ConfigError
            If the file is missing or unreadable, or any key or value is invalid.
        """
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}: give the path of an "
                              "FTI-style INI file") from exc
        return cls.from_string(text, source=str(p), **overrides)

    @classmethod
    def from_string(cls, text: str, *, source: str = "<string>", **overrides: Any) -> Config:
        """Parse INI ``text`` (FTI's sections and keys); ``overrides`` replace keys after parsing.

        Raises
        ------
        ConfigError
            On INI syntax errors, unknown sections or keys, and invalid values.
        """
        parser = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None,
                                           strict=True)
        try:
            parser.read_string(text, source=source)
        except configparser.Error as exc:
            raise ConfigError(f"{source}: not a valid INI file: {exc}") from exc
        values: dict[str, Any] = {}
        for section in parser.sections():
            sec = section.strip().lower()
            for key, raw in parser.items(section):
                key = key.strip().lower()
                name = _FROM_INI.get((sec, key))
                if name is None and sec == "basic" and KEY_SECTIONS.get(key) == "ftkit":
                    name = key
                if name is None:
                    known = sorted(k for (s, k) in _FROM_INI if s == sec)
                    where = (f"allowed keys in [{sec}]: {', '.join(known)}" if known else
                             "allowed sections: [basic], [restart], [injection], [advanced], [ftkit]")
                    raise ConfigError(f"{source}: unknown key '{key}' in section [{section}] "
                                      f"(value {raw!r}); {where}")
                values[name] = _parse(name, raw.strip(), source)
        values.update(overrides)
        return cls(source=source, **values)

    def replace(self, **changes: Any) -> Config:
        """Return a copy with ``changes`` applied (validated)."""
        return replace(self, **changes)

    # -- checks that need the job ---------------------------------------------------------------------------

    def validate_for(self, nranks: int) -> None:
        """Check the keys that depend on the job size.

        Raises
        ------
        ConfigError
            If ``node_size`` does not divide ``nranks``, or ``head = 1`` leaves a node without application
            ranks.
        """
        if self.node_size and nranks % self.node_size != 0:
            raise ConfigError(f"{self.source}: node_size = {self.node_size} does not divide the number of "
                              f"ranks ({nranks}): use a node_size that divides {nranks}, or change -n")
        if self.head and self.node_size == 1:
            raise ConfigError(f"{self.source}: head = 1 with node_size = 1 leaves no application rank on a "
                              "node: use node_size >= 2 or head = 0")

    def ensure_dirs(self) -> None:
        """Create ``ckpt_dir``, ``glbl_dir`` and ``meta_dir`` if missing.

        Raises
        ------
        ConfigError
            Naming the key and the path, if a directory cannot be created or written.
        """
        for key in ("ckpt_dir", "glbl_dir", "meta_dir"):
            path: Path = getattr(self, key)
            try:
                path.mkdir(parents=True, exist_ok=True)
                if not os.access(path, os.W_OK | os.X_OK):
                    raise PermissionError(13, "not writable")
            except OSError as exc:
                raise ConfigError(f"{self.source}: {key} = {path}: cannot create or write this directory "
                                  f"({exc.strerror or exc}); allowed: a directory this user can create and "
                                  "write") from exc

    def interval(self, level: int) -> int:
        """Return the checkpoint interval of ``level`` (``ckpt_l<level>``; 0 = off)."""
        return int(getattr(self, f"ckpt_l{level}"))

    def inline(self, level: int) -> bool:
        """Return whether ``level``'s post-processing runs inside the checkpoint call (always for L1)."""
        return level == 1 or bool(getattr(self, f"inline_l{level}"))

    @property
    def io_chunk_bytes(self) -> int:
        """Size (bytes) of one I/O chunk: ``transfer_size`` MiB."""
        return self.transfer_size * 2**20


def load_config(config: Config | str | os.PathLike[str] | Mapping[str, Any]) -> Config:
    """Return ``config`` as a :class:`Config`: a Config is returned as is, a path is read, a mapping of key
    names to values is validated.

    Raises
    ------
    ConfigError
        If the file cannot be read or any key is invalid.
    """
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        unknown = sorted(set(config) - set(_SPEC))
        if unknown:
            raise ConfigError(f"unknown configuration key(s) {unknown}; allowed: {sorted(_SPEC)}")
        return Config(source="<mapping>", **dict(config))
    return Config.from_file(config)


def _parse(name: str, raw: str, source: str) -> Any:
    """Convert the INI text of key ``name`` to the key's type."""
    section, kind, _ = _SPEC[name]
    key = _INI_NAME.get(name, name)
    if kind == "int":
        try:
            return int(raw, 10)
        except ValueError:
            raise ConfigError(f"{source}: [{section}] {key} = {raw!r} is not an integer; "
                              f"allowed: {_describe(name)}") from None
    if kind == "float":
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{source}: [{section}] {key} = {raw!r} is not a number; "
                              f"allowed: {_describe(name)}") from None
        return value
    if kind == "path":
        return raw
    return raw.strip().lower() if name in ("interval_unit", "l3_code") else raw


def _describe(name: str) -> str:
    _, kind, allowed = _SPEC[name]
    if isinstance(allowed, tuple):
        return " or ".join(str(a) for a in allowed)
    if isinstance(allowed, dict):
        low, high = allowed["low"], allowed["high"]
        op = ">" if allowed.get("open_low") else ">="
        return f"{'an integer' if kind == 'int' else 'a number'} {op} {low}" + (
            f" and <= {high}" if high is not None else "")
    if kind == "path":
        return "a directory path"
    return "letters, digits, '.', '_' and '-' (at most 128)"


def _check(name: str, value: Any, source: str) -> Any:
    """Validate (and normalise) one key's value; raise ConfigError naming key, value and what is allowed."""
    section, kind, allowed = _SPEC[name]
    key = _INI_NAME.get(name, name)
    where = f"{source}: [{section}] {key} = {value!r}"
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} is not an integer; allowed: {_describe(name)}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{where} is not a finite number; allowed: {_describe(name)}")
        value = float(value)
    elif kind == "path":
        if not isinstance(value, str | os.PathLike) or not str(value).strip():
            raise ConfigError(f"{where} is not a directory path; allowed: {_describe(name)}")
        return Path(os.path.expanduser(str(value).strip())).absolute()
    else:
        if not isinstance(value, str):
            raise ConfigError(f"{where} is not a string; allowed: {_describe(name)}")
        if name == "exec_id" and not _EXEC_ID_RE.match(value):
            raise ConfigError(f"{where} has characters that cannot name a directory; allowed: "
                              f"{_describe(name)}")
    if isinstance(allowed, tuple) and value not in allowed:
        hint = _UNSUPPORTED_HINT.get(name)
        note = f" ({hint})" if hint else ""
        raise ConfigError(f"{where} is not allowed; allowed: {_describe(name)}{note}")
    if isinstance(allowed, dict):
        low, high = allowed["low"], allowed["high"]
        too_low = value <= low if allowed.get("open_low") else value < low
        if too_low or (high is not None and value > high):
            extra = ""
            if name == "group_size":
                extra = " (a group needs at least 2 nodes; Reed-Solomon over GF(2^8) bounds it above)"
            if name == "transfer_size":
                extra = " (MiB per I/O chunk; it bounds ftkit's extra memory per rank)"
            raise ConfigError(f"{where} is out of range; allowed: {_describe(name)}{extra}")
    return value
