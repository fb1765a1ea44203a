"""Progress of the long offline commands (``ftkit verify``, ``rebuild``, ``export``) on a terminal.

One tqdm bar on standard error: bytes done of the total, files done, rate and time left. It is shown only
when standard error is a terminal and the command does not print JSON; otherwise nothing is drawn and the
command prints only its final lines. Counting costs one call per file or slab.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

__all__ = ["Progress", "wants_progress"]




def wants_progress(args: Any) -> bool:
    """Whether a command run with ``args`` draws progress: stderr is a terminal and no ``--json``."""
    return not getattr(args, "json", False) and sys.stderr.isatty()


class Progress:
    """Files and bytes done of ``total_files`` / ``total_bytes``; a bar when ``shown``, else nothing.

    Use as a context manager; :meth:`add` after each file or slab.
    """

    def __init__(self, what: str, total_files: int, total_bytes: int, shown: bool) -> None:
        self.total_files, self.files = total_files, 0
        self.bar: Any = None
        if shown:
            from tqdm import tqdm

            self.bar = tqdm(total=max(total_bytes, 0), desc=what, unit="B", unit_scale=True,
                            unit_divisor=1024, file=sys.stderr, dynamic_ncols=True, leave=False,
                            mininterval=0.5, postfix=self._files_done())

    def _files_done(self) -> str:
        return f"{self.files}/{self.total_files} files"

    def _postfix(self) -> None:
        self.bar.set_postfix_str(self._files_done(), refresh=False)

    def add(self, nbytes: int = 0, files: int = 0) -> None:
        """Count ``nbytes`` bytes and ``files`` files as done."""
        self.files += files
        if self.bar is not None:
            if files:
                self._postfix()
            self.bar.update(nbytes)

    def counting(self, writer: Any, datasets: int, nbytes: int) -> _Counted:
        """Count what ``writer`` (an export's output) writes from now on: ``datasets`` datasets of
        ``nbytes`` bytes in all replace the totals given at construction."""
        self.total_files = datasets
        if self.bar is not None:
            self._postfix()
            self.bar.reset(total=nbytes)
        return _Counted(writer, self)

    def close(self) -> None:
        """Remove the bar (the command's final lines follow)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class _Counted:
    """An export writer whose ``create`` counts a file (dataset) and whose ``write`` counts its bytes."""

    def __init__(self, writer: Any, progress: Progress) -> None:
        self.writer, self.progress = writer, progress

    def create(self, *args: Any) -> Any:
        self.progress.add(files=1)
        return self.writer.create(*args)

    def write(self, dset: Any, region: Any, data: Any) -> None:
        self.writer.write(dset, region, data)
        self.progress.add(int(data.nbytes))

    def commit(self, attrs: Any) -> None:
        self.writer.commit(attrs)

    def abort(self) -> None:
        self.writer.abort()
