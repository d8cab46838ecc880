"""The run trace: JSONL records, each written with one write + flush + fsync.

A public format; these names are stable: every record has `type` (run_start, iteration, run_end) and
`schema`; an iteration has `i`, `drafter`, `remaining_before`, `remaining_after`, `draft_ms`,
`verify_ms` and `candidates`; run_end has `outcome`.
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
    """Appends records to a trace file; a crash never loses a record that was written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

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

    def _write(self, data: memoryview) -> int:
        written = os.write(self._fd, data)
        if written <= 0:
            raise OSError(errno.ENOSPC, "no space left on the device")
        return written

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


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
