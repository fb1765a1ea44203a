"""ftkit's exception hierarchy.

Every error ftkit raises derives from :class:`FtkitError`. Where a built-in exception fits, the
ftkit error also derives from it (as zarr does), so callers can catch either: a
``CheckpointNotFoundError`` is also a ``FileNotFoundError``, a ``GridError`` is also a ``ValueError``.
Messages say what was wrong and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "FtkitError",
    "ConfigError",
    "TopologyError",
    "LaunchError",
    "CodecError",
    "StorageError",
    "DirectIOUnsupported",
    "FormatError",
    "CorruptionError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "RecoveryError",
    "ShapeMismatchError",
    "ProcessFailure",
    "TimeoutFailure",
    "Fenced",
    "ULFMUnavailable",
    "LaunchMismatchError",
    "RunLockedError",
    "UnsafePathError",
    "LinalgError",
    "GridError",
    "DescriptorError",
    "PBLASArgumentError",
    "FactorizationError",
    "ABFTError",
    "ABFTArgumentError",
    "ModelError",
    "ConfigWarning",
    "OnlineRecoveryError",
    "MissingCopyError",
    "UnsupportedStateError",
]


class FtkitError(Exception):
    """Base class of every error ftkit raises."""


class ConfigError(FtkitError, ValueError):
    """A configuration key, value or combination is invalid.

    The message names the key, the value and what is allowed.
    """


class TopologyError(ConfigError):
    """The ranks cannot be arranged into nodes, groups or partners as configured."""


class LaunchError(FtkitError, RuntimeError):
    """mpirun could not be found or the launch command line is invalid."""


class CodecError(FtkitError, ValueError):
    """Erasure-code misuse: mismatched fragment lengths, too few fragments, bad indices, bad (k, m)."""


class StorageError(FtkitError, OSError):
    """A checkpoint file or directory could not be written, read or committed."""


class DirectIOUnsupported(StorageError):
    """The file system refuses direct I/O (``O_DIRECT``: tmpfs on older kernels, ramfs, some NFS and FUSE
    mounts). ftkit's writers then write through the page cache; only a caller that asked for direct I/O
    alone sees it."""


class FormatError(StorageError):
    """A file is not an ftkit file, has an unsupported version, or is truncated."""


class CorruptionError(FormatError):
    """A file's contents do not match its recorded checksum."""


class CheckpointError(FtkitError, RuntimeError):
    """A checkpoint could not be taken (bad level, nothing protected, background work failed...)."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint with the requested id or level exists."""


class RecoveryError(FtkitError, RuntimeError):
    """No complete, verified checkpoint can be recovered; the message names what is missing."""


class ShapeMismatchError(RecoveryError, ValueError):
    """A protected array's shape or dtype differs from the one stored in the checkpoint."""


class ProcessFailure(FtkitError, RuntimeError):
    """One or more MPI processes failed; ``failed_ranks`` lists them (ranks of the communicator used)."""

    def __init__(self, message: str, failed_ranks: tuple[int, ...] | list[int] = ()) -> None:
        super().__init__(message)
        self.failed_ranks = tuple(sorted(int(r) for r in failed_ranks))


class TimeoutFailure(ProcessFailure, TimeoutError):
    """A peer did not answer within the configured timeout."""


class Fenced(ProcessFailure):
    """This process was declared dead by a peer (it missed a deadline) and must stop taking part."""


class ULFMUnavailable(FtkitError, RuntimeError):
    """A feature needs ULFM (revoke, agree, shrink) and this MPI or this launch does not provide it.

    The message says what was found missing and how to enable it (which MPI, which launcher flags).
    """


class LaunchMismatchError(LaunchError):
    """The launcher's environment says N ranks but ``MPI.COMM_WORLD`` has another size (mis-launched job)."""


class RunLockedError(CheckpointError):
    """Another live job owns this run's metadata directory; the message names it and what to do."""


class UnsafePathError(ConfigError):
    """A path from the configuration or from a manifest would leave its root directory (or is a link)."""


class LinalgError(FtkitError, ValueError):
    """Base class of the distributed linear-algebra errors."""


class GridError(LinalgError):
    """A process grid cannot be built on the given communicator with the given shape."""


class DescriptorError(LinalgError):
    """A matrix descriptor is inconsistent (block sizes, leading dimension, source process...)."""


class FactorizationError(LinalgError):
    """A factorization met a matrix it cannot factor; ``minor`` is ScaLAPACK's ``INFO > 0``: the 1-based
    order of the leading minor (of the submatrix) that is not positive definite."""

    def __init__(self, routine: str, minor: int, n: int) -> None:
        super().__init__(f"{routine}: the leading minor of order {minor} of the {n} x {n} matrix is not "
                         "positive definite (a pivot <= 0, NaN or Inf), so it has no Cholesky factor; check "
                         "that the matrix is symmetric positive definite, or use an LU/LDL^T factorization")
        self.routine, self.minor = routine, minor


class PBLASArgumentError(LinalgError):
    """A PBLAS routine got an illegal argument; ``position`` is its 1-based position, as PBLAS reports."""

    def __init__(self, routine: str, position: int, message: str) -> None:
        super().__init__(f"{routine}: argument {position} is illegal: {message}")
        self.routine = routine
        self.position = position


class ABFTError(LinalgError):
    """The checksum protection detected an error it could not correct (or a block it could not check).

    ``report`` is the :class:`~ftkit.linalg.abft.ABFTReport` of the call, when there is one.
    """

    def __init__(self, message: str, *, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class ModelError(FtkitError, ValueError):
    """Invalid parameters for a reliability or cost model."""


class ABFTArgumentError(LinalgError):
    """An ABFT routine (checksums, thresholds, policies) got an illegal argument; the message names it."""


class ConfigWarning(UserWarning):
    """A configuration loads, but ftkit ignores or reinterprets part of it (the message says what and why).

    Issued once per loaded configuration (Python's :mod:`warnings`); not an :class:`FtkitError`.
    """


class OnlineRecoveryError(ProcessFailure):
    """The job cannot recover online (spares exhausted, no rank left that knew the run's state, no checkpoint
    covers the new set of ranks): raised on every survivor; the newest complete checkpoint stays on disk and a
    relaunch recovers from it."""


class MissingCopyError(RecoveryError):
    """No verified copy of some rank's checkpoint file is reachable (an older checkpoint may still be)."""


class UnsupportedStateError(CheckpointError, TypeError):
    """Application state given to ``protect()`` holds a value the typed state encoding cannot store; the
    message names its path (``state['history'][3]: set is not supported``)."""
