"""ftkit's configuration: FTI's INI file, with its keys as they are, plus a few keys of ftkit's own.

A configuration is a :class:`Config` (a validated dataclass). It is read from an INI file with
:meth:`Config.from_file` (or :meth:`Config.from_string`), or built directly with keyword arguments.
``ftkit config check FILE`` prints how a file is read, key by key.

Every key FTI 1.6 reads is accepted (the table, with what ftkit does with each key, is
:data:`ftkit.config_fti.KEYS`), with FTI's parser rules (:mod:`ftkit.config_fti`): names are
case-insensitive, unknown keys and sections are ignored, a repeated key keeps its last value and an empty
value means the default. Where ftkit does not implement what a key asks for (``ckpt_io = 2..6``, FTI's MPI
tags, Lustre striping, the HDF5 single-file keys...) the key is accepted and ignored. Everything ignored or
reinterpreted is said in the :attr:`Config.notes`, issued once per configuration as one
:class:`~ftkit.errors.ConfigWarning` by a job's rank 0, pointing at the user's call. A value that cannot mean
anything (a non-numeric interval, an ``exec_id`` that is not a plain name, ``fast_forward = 20``, a NUL byte
in a directory) raises :class:`ConfigError` naming the key, the value and what is allowed.

Sections and keys (FTI's meaning and units; ftkit's own keys in ``[ftkit]``, also accepted in ``[basic]``):

``[basic]``
    ``head``, ``node_size``, ``group_size`` (nodes per L2/L3 group; 1 loads with L2/L3 off, and an L2/L3
    checkpoint is then refused: :meth:`Config.check_level`), ``ckpt_dir``, ``glbl_dir``, ``meta_dir``,
    ``ckpt_l1``..``ckpt_l4`` and ``dcp_l4`` (intervals in minutes, or in ``snapshot()`` calls with
    ``interval_unit = iterations``; 0 = off), ``inline_l2``..``inline_l4``, ``keep_last_ckpt``,
    ``keep_l4_ckpt``, ``enable_dcp``, ``dcp_block_size``, ``max_sync_intv``, ``verbosity`` (the level of
    ftkit's event log, :mod:`ftkit.eventlog`: 1 debug, 2 info, 3 warnings and errors only); accepted and
    ignored: ``ckpt_io`` other than 1, ``enable_staging``, ``enable_icp``, ``keep_heads_alive``,
    ``max_var_id``, ``cacheddcp``, ``dcp_mode``, ``dcp_stack_size``, ``h5_single_file_*``.
``[restart]``
    ``failure`` (0 = ftkit detects a restart from ``meta_dir``), ``exec_id`` (a plain name: letters, digits,
    ``.``, ``_``, ``-``, not ``.`` or ``..``). As in FTI, ``exec_id`` is read only with ``failure = 1..3``
    (the restart of that run: the manifest in ``meta_dir`` must be that run's); a fresh start always makes a
    new id (UTC date and time plus 4 random hex digits), and FTI's template value ``XXXX-XX-XX_XX-XX-XX`` is
    no id at all (a note).
``[injection]``
    ``rank``, ``index``, ``number``, ``position``, ``frequency``: accepted and ignored (use
    :mod:`ftkit.inject`).
``[advanced]``
    ``fast_forward`` (1-10: snapshot intervals are divided by it), ``transfer_size`` (MiB per I/O chunk);
    accepted and ignored: ``block_size``, the MPI tags, ``local_test = 0``, ``gpu_host_bufsize``,
    ``lustre_striping_*`` (also as FTI's code spells them, ``lustre_stiping_*``).
``[ftkit]``
    ``interval_unit`` (``minutes`` | ``iterations``), ``l3_code`` (``rs`` | ``xor``), ``mtbf`` (seconds),
    ``failure_timeout`` (seconds a wait on a peer may take), ``group_access`` (0|1: 1 lets the user's group
    read checkpoint files, 0640/0750; default 0: 0600/0700), ``spare_ranks`` (the job's last N processes are
    spares for online recovery; needs ULFM). ``reserve_core`` (0|1: 1 keeps the last core of each process's
    CPU set for the checkpoint work: :mod:`ftkit.checkpoint.affinity`). ``redundancy_sync`` (``background``,
    the default: inline L2 copies and L3 parity files are fsynced by a background thread after the commit, the
    previous checkpoint complete at that level kept until then; ``commit``: before the commit; work of a
    background thread or the heads is always fsynced before its level is committed). ``exit_margin``,
    ``exit_level``, ``end_time``: when ``should_exit()`` stops the job (:mod:`ftkit.checkpoint.exitpolicy`).
    ``log_level`` (``debug`` | ``info`` | ``warning`` | ``error`` | ``off``; default: from ``verbosity``):
    ftkit's event log; ``$FTKIT_LOG`` overrides it.

Directories: ``$VAR`` and ``${VAR}`` are expanded from the environment (an unset variable is a
:class:`ConfigError` naming it), then ``~``; relative paths are resolved against the working directory when
the configuration is built. The default ``ckpt_dir`` is node-local: ``$SLURM_TMPDIR/ftkit-local``, else
``$TMPDIR/ftkit-local``, else ``ftkit-local`` in the working directory; ``glbl_dir`` and ``meta_dir`` default
to ``ftkit-global`` and ``ftkit-meta`` in the working directory.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ._paths import check_plain_name
from .config_fti import KEYS, describe, key_status, parse_entries
from .config_notes import issue_notes
from .errors import ConfigError, UnsafePathError
from .walltime import parse_end_time

__all__ = ["Config", "load_config", "KEY_SECTIONS", "node_local_default", "expand_path", "check_value"]

_SPEC = {k.name: k for k in KEYS}
#: Section of every key ftkit reads (FTI's sections; ftkit's own keys live in ``[ftkit]``).
KEY_SECTIONS: dict[str, str] = {k.name: k.section for k in KEYS}
_VAR_RE = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
#: FTI's "unset" dCP block size (its test template) and the size ftkit uses then.
_DCP_BLOCK_UNSET, _DCP_BLOCK_DEFAULT = -1, 16384
#: The ``exec_id`` of FTI's template config (FTI overwrites it when a job starts): a placeholder, no run id.
_EXEC_ID_PLACEHOLDER = "XXXX-XX-XX_XX-XX-XX"
#: Why a key's range is what it is, added to the message of a value out of range.
_RANGE_NOTES = {"group_size": " (Reed-Solomon over GF(2^8) bounds it above; L2/L3 need >= 2)",
                "transfer_size": " (MiB per I/O chunk; it bounds ftkit's extra memory per rank)",
                "dcp_block_size": " (or -1, FTI's 'unset': 16384)"}


def node_local_default() -> Path:
    """Return the default ``ckpt_dir``: ``$SLURM_TMPDIR/ftkit-local``, else ``$TMPDIR/ftkit-local``, else
    ``ftkit-local`` (relative to the working directory)."""
    for var in ("SLURM_TMPDIR", "TMPDIR"):
        root = os.environ.get(var, "").strip()
        if root:
            return Path(root) / "ftkit-local"
    return Path("ftkit-local")


@dataclass(frozen=True)
class Config:
    """A validated ftkit/FTI configuration (see the module docstring for every key, its unit and meaning).

    Raises
    ------
    ConfigError
        On construction, if any value is of the wrong type or outside what is allowed, or if L2/L3
        intervals are set with ``group_size < 2``.
    """

    head: int = 0
    node_size: int = 0
    group_size: int = 4
    ckpt_dir: Path = field(default_factory=node_local_default)
    glbl_dir: Path = field(default=Path("ftkit-global"))
    meta_dir: Path = field(default=Path("ftkit-meta"))
    ckpt_l1: int = 0
    ckpt_l2: int = 0
    ckpt_l3: int = 0
    ckpt_l4: int = 0
    dcp_l4: int = 0
    inline_l2: int = 1
    inline_l3: int = 1
    inline_l4: int = 1
    h5_single_file_inline: int = 1
    enable_staging: int = 0
    keep_heads_alive: int = 0
    enable_dcp: int = 0
    dcp_mode: int = 0
    dcp_block_size: int = _DCP_BLOCK_DEFAULT
    dcp_stack_size: int = 5
    max_var_id: int = 100 * 1024
    cacheddcp: int = 0
    verbosity: int = 2
    keep_last_ckpt: int = 0
    keep_l4_ckpt: int = 0
    ckpt_io: int = 1
    max_sync_intv: int = 0
    h5_single_file_dir: str = ""
    h5_single_file_prefix: str = "VPR-h5"
    h5_single_file_keep: int = 0
    h5_single_file_enable: int = 0
    enable_icp: int = 0
    failure: int = 0
    exec_id: str = ""
    inj_rank: int = 0
    inj_index: int = 0
    inj_position: int = 0
    inj_number: int = 0
    inj_frequency: int = 0
    fast_forward: int = 1
    block_size: int = 1024
    transfer_size: int = 16
    general_tag: int = 2612
    ckpt_tag: int = 711
    stage_tag: int = 406
    final_tag: int = 3107
    mpi_tag: int = 2612
    local_test: int = 1
    gpu_host_bufsize: int = 32 * 2**20
    lustre_striping_unit: int = 4194304
    lustre_striping_factor: int = -1
    lustre_striping_offset: int = -1
    interval_unit: str = "minutes"
    l3_code: str = "rs"
    mtbf: float = 0.0
    failure_timeout: float = 300.0
    group_access: int = 0
    spare_ranks: int = 0
    reserve_core: int = 0
    redundancy_sync: str = "background"
    exit_margin: float = 0.0
    exit_level: int = 4
    end_time: str = ""
    log_level: str = ""
    compression: str = "none"      # L4 copies: none | lz4 | zstd | blosc (ftkit.storage.format.compressed)
    compression_level: int = 3
    source: str = field(default="<defaults>", compare=False)
    #: Notes of the INI reader (unknown, repeated and empty keys); set by :meth:`from_string`.
    parse_notes: tuple[str, ...] = field(default=(), compare=False, repr=False)
    #: Keys the file set (an ignored key is reported when present, or when it differs from the default).
    present: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    #: Everything ignored or reinterpreted in this configuration (issued once as a ConfigWarning).
    notes: tuple[str, ...] = field(init=False, compare=False, repr=False, default=())

    def __post_init__(self) -> None:
        notes = list(self.parse_notes)
        if self.dcp_block_size == _DCP_BLOCK_UNSET:
            object.__setattr__(self, "dcp_block_size", _DCP_BLOCK_DEFAULT)
            notes.append(f"[basic] dcp_block_size = -1 (FTI's 'unset'): ftkit uses {_DCP_BLOCK_DEFAULT} "
                         "bytes")
        if self.exec_id == _EXEC_ID_PLACEHOLDER:
            object.__setattr__(self, "exec_id", "")
            notes.append(f"[restart] exec_id = {_EXEC_ID_PLACEHOLDER} (FTI's template placeholder): no run "
                         "id; a fresh start makes a new one, a restart takes the one in meta_dir's manifest")
        for name in _SPEC:
            object.__setattr__(self, name, check_value(name, getattr(self, name), self.source))
        if self.group_size < 2:
            using = [f"ckpt_l{lv} = {self.interval(lv)}" for lv in (2, 3) if self.interval(lv)]
            if using:
                raise ConfigError(f"{self.source}: [basic] group_size = {self.group_size} with "
                                  f"{' and '.join(using)}: L2 and L3 need groups of at least 2 nodes; set "
                                  "group_size >= 2 or turn L2/L3 off (0)")
            notes.append(f"[basic] group_size = {self.group_size}: no L2/L3 groups; an L2 or L3 checkpoint "
                         "will be refused (L1 and L4 work)")
        if ignored := _ignored_note(self):
            notes.append(ignored)
        object.__setattr__(self, "notes", tuple(notes))
        issue_notes(self.source, notes)

    # -- construction -------------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **overrides: Any) -> Config:
        """Read an FTI-style INI file; ``overrides`` replace keys after reading.

        Raises
        ------
        ConfigError
            If the file is missing or unreadable, or any value is invalid.
        """
        p = Path(path)
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ConfigError(f"cannot read config file {p}: {reason}: give the path of an "
                              "FTI-style INI file") from exc
        return cls.from_string(text, source=str(p), **overrides)

    @classmethod
    def from_string(cls, text: str, *, source: str = "<string>", **overrides: Any) -> Config:
        """Parse INI ``text`` with FTI's rules; ``overrides`` replace keys after parsing.

        Unknown keys and sections, repeated keys and empty values are notes (see :attr:`notes`), not errors.

        Raises
        ------
        ConfigError
            On an INI syntax error (a line that is not a section, key or comment) and on invalid values.
        """
        values, lines, notes = parse_entries(text, source, _default_text)
        values.update(overrides)
        return cls(source=source, parse_notes=tuple(notes), present=frozenset(lines) | frozenset(overrides),
                   **values)

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

    def check_level(self, level: int, needs_groups: bool | None = None) -> None:
        """Check that a checkpoint at ``level`` can be taken with this configuration (when one is asked for).

        ``needs_groups`` is the level's record in the level table (:mod:`ftkit.storage.levels`); None: FTI's
        levels, where L2 and L3 need groups.

        Raises
        ------
        ConfigError
            For a level that needs groups with ``group_size < 2`` (a configuration that loaded with a
            warning because L2/L3 were off).
        """
        if needs_groups is None:
            needs_groups = level in (2, 3)
        if needs_groups and self.group_size < 2:
            raise ConfigError(f"{self.source}: an L{level} checkpoint needs groups of at least 2 nodes, but "
                              f"group_size = {self.group_size}: set group_size >= 2, or use level 1 or 4")

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
        """Return the checkpoint interval of FTI's ``level`` (``ckpt_l<level>``, as configured; 0 = off or no
        such key). ftkit itself asks the level table (:func:`ftkit.storage.levels.interval`)."""
        return int(getattr(self, f"ckpt_l{level}", 0))

    def inline(self, level: int) -> bool:
        """Return whether FTI's ``level``'s post-processing runs inside the checkpoint call
        (``inline_l<level>``; without that key, as L1, always). ftkit itself asks the level table
        (:func:`ftkit.storage.levels.inline`)."""
        return bool(getattr(self, f"inline_l{level}", 1))

    @property
    def io_chunk_bytes(self) -> int:
        """Size (bytes) of one I/O chunk: ``transfer_size`` MiB."""
        return self.transfer_size * 2**20


def _default(name: str) -> Any:
    f = next(f for f in fields(Config) if f.name == name)
    return f.default_factory() if callable(f.default_factory) else f.default


def _default_text(name: str) -> Any:
    if name == "ckpt_dir":
        return f"{node_local_default()} (node-local: $SLURM_TMPDIR, else $TMPDIR, else the working directory)"
    return _default(name)


def _ignored_note(cfg: Config) -> str:
    """One note naming every key set in ``cfg`` that ftkit ignores, grouped by what ftkit does instead."""
    by_reason: dict[str, list[str]] = {}
    for spec in KEYS:
        value = getattr(cfg, spec.name)
        if spec.name not in cfg.present and value == _default(spec.name):
            continue
        status, instead = key_status(cfg, spec)
        if status == "ignored":
            by_reason.setdefault(instead, []).append(f"[{spec.section}] {spec.ini} = {value}")
    if not by_reason:
        return ""
    parts = [f"{', '.join(keys)} ({why})" for why, keys in by_reason.items()]
    return "ignored keys (accepted for FTI compatibility): " + "; ".join(parts)


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


def expand_path(value: str, where: str) -> Path:
    """Expand ``$VAR``/``${VAR}`` from the environment, then ``~``; return the absolute path.

    Raises
    ------
    ConfigError
        Naming the variable, if one is unset or not a valid variable name.
    """
    def sub(m: re.Match[str]) -> str:
        var = m.group(1) if m.group(1) is not None else m.group(2)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
            raise ConfigError(f"{where}: '${{{var}}}' is not an environment variable name (only $NAME and "
                              "${NAME} are expanded)")
        if var not in os.environ:
            raise ConfigError(f"{where}: environment variable ${var} is not set: set it, or write the "
                              "directory out in full")
        return os.environ[var]

    return Path(os.path.expanduser(_VAR_RE.sub(sub, value))).absolute()


def check_value(name: str, value: Any, source: str) -> Any:
    """Validate and normalise one key's value (a path is expanded and made absolute); return it.

    Raises
    ------
    ConfigError
        Naming the key, the value and what is allowed.
    """
    spec = _SPEC[name]
    allowed, kind = spec.allowed, spec.kind
    where = f"{source}: [{spec.section}] {spec.ini} = {value!r}"
    if kind in ("int", "flag", "bool"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} is not an integer; allowed: {describe(_SPEC[name])}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{where} is not a finite number; allowed: {describe(_SPEC[name])}")
        value = float(value)
    elif kind == "path":
        if not isinstance(value, str | os.PathLike) or not str(value).strip():
            raise ConfigError(f"{where} is not a directory path; allowed: {describe(_SPEC[name])}")
        if "\x00" in str(value):  # no file system takes it: mkdir/open would raise a bare ValueError
            raise ConfigError(f"{where} holds a NUL byte, which no path can contain: remove it (is the file "
                              "binary or corrupted?); allowed: " + describe(_SPEC[name]))
        return expand_path(str(value).strip(), f"{source}: [{spec.section}] {spec.ini} = {str(value)!r}")
    else:
        if not isinstance(value, str):
            raise ConfigError(f"{where} is not a string; allowed: {describe(_SPEC[name])}")
        if name == "end_time" and value.strip():
            parse_end_time(value, where)  # ISO 8601 with a zone, or seconds since the epoch
        if name == "exec_id" and value:
            try:
                check_plain_name(value, f"{source}: [restart] exec_id")
            except UnsafePathError as exc:
                raise UnsafePathError(f"{exc}; it names the run's directories under glbl_dir, ckpt_dir and "
                                      "meta_dir") from None
    if isinstance(allowed, tuple) and value not in allowed:
        raise ConfigError(f"{where} is not allowed; allowed: {describe(_SPEC[name])}")
    if isinstance(allowed, dict):
        low, high = allowed["low"], allowed["high"]
        too_low = value <= low if allowed.get("open_low") else value < low
        if too_low or (high is not None and value > high):
            raise ConfigError(f"{where} is out of range; allowed: {describe(_SPEC[name])}"
                              f"{_RANGE_NOTES.get(name, '')}")
    return value
