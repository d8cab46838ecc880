"""The run trace: JSONL records, each written with one write + flush + fsync.

A public format, its names stable: every record has `type` (run_start, iteration, gate, run_end)
and `schema`; docs/trace-format.md lists every field of each record.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError

SCHEMA = 1


class TraceError(RalphError):
    """The trace cannot be written (a full disk): the run stops, its branch no further than its trace."""


class TraceWriter:
    """Appends records to a trace file; a crash never loses a record that was written, and a trace
    that never got one (a disk full from the start) is not left behind empty."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.last: str | None = None  # the type of the last record written whole, None before the first
        self._made: list[Path] = []  # directories made for the trace, removed with it when left empty
        try:
            self._make_parents()
            self._fd, self._created = _open_append(path)
        except OSError as exc:
            self._remove_made()
            raise TraceError(f"cannot write the trace {path}: {exc.strerror or exc}") from None

    def write(self, type_: str, **fields: Any) -> None:
        """Append one record whole, or not at all: a short write (a full disk) is cut back off and
        raised as an error naming the trace, so no torn record is ever left mid-file."""
        record = {"type": type_, "schema": SCHEMA, **fields}
        data = memoryview((json.dumps(record, default=str) + "\n").encode())
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[self._write(data) :]
            os.fsync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise TraceError(f"cannot write the trace {self.path}: {exc.strerror or exc}") from None
        except BaseException:  # Ctrl-C between two partial writes: no torn record either
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise
        self.last = type_

    def _write(self, data: memoryview) -> int:
        written = os.write(self._fd, data)
        if written <= 0:
            raise OSError(errno.ENOSPC, "no space left on the device")
        return written

    def close(self) -> None:
        """Close the file; one this writer created and never wrote a record to is removed, with the
        directories made for it (a file that was there before, a resumed run's, always stays)."""
        if self._fd < 0:
            return
        os.close(self._fd)
        self._fd = -1
        if self._created and self.last is None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self._remove_made()

    def _make_parents(self) -> None:
        missing = [p for p in (self.path.parent, *self.path.parent.parents) if not p.exists()]
        for folder in reversed(missing):  # outermost first
            with contextlib.suppress(FileExistsError):  # made meanwhile, by another run: not ours
                folder.mkdir()
                self._made.append(folder)

    def _remove_made(self) -> None:
        for folder in reversed(self._made):  # innermost first; one that holds anything stays
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._made = []


def _open_append(path: Path) -> tuple[int, bool]:
    """A descriptor appending to `path`, and whether this call created the file."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        return os.open(path, flags), False


def one_line(exc: BaseException) -> str:
    """Why a run failed, on one line (a run_end's `error`, the command line's message): a RalphError's
    message (written for people), any other exception's type and message."""
    text = str(exc) if isinstance(exc, RalphError) else f"{type(exc).__name__}: {exc}".removesuffix(": ")
    return " ".join(text.split())


def read_trace(path: Path) -> list[dict[str, Any]]:
    """All whole records of a trace; a torn last line (a crash mid-write) is skipped."""
    return list(_records(path))


def _records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                return  # torn final write
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "type" in record:
                yield record
