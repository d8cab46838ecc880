"""A task's project as bytes: packed where the task is read, unpacked where it runs (this machine's
worker process or another machine's Ray worker), and the repository it leaves packed for the way back."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

from ralph.domain.errors import RalphError

# Left out of a project when it is shipped: its history, ralph's own runs, bytecode, its interpreter.
NOT_SHIPPED = (".git", ".ralph", "__pycache__", ".venv")


class Unshippable(RalphError):
    """A task's project that cannot be packed (missing, a dangling link, a special file, unreadable):
    that task's result, never the bench's end."""


def pack(project: Path, leave_out: tuple[str, ...] = NOT_SHIPPED) -> bytes:
    """`project`'s files as a gzipped tar, links followed (as a copy would), `leave_out` names left out
    wherever they are."""
    if not project.is_dir():
        raise Unshippable(f"{project}: cannot be shipped (no such directory)")
    buffer = io.BytesIO()

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if Path(info.name).name in leave_out:
            return None
        if not (info.isfile() or info.isdir()):
            raise Unshippable(f"{project}: cannot be shipped ({info.name} is not a file or a directory)")
        return info

    try:
        with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1, dereference=True) as tar:
            tar.add(project, arcname=".", filter=plain)
    except OSError as exc:
        where = os.path.relpath(exc.filename, project) if isinstance(exc.filename, str) else ""
        raise Unshippable(
            f"{project}: cannot be shipped ({where + ': ' if where else ''}{exc.strerror or exc})"
        ) from None
    return buffer.getvalue()


def unpack(packed: bytes, into: Path) -> None:
    """What `pack` made, as the directory `into` (replacing what was there)."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
        safe: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # (3.11.4+)
        tar.extractall(into, **safe)  # (the "data" filter: nothing written outside `into`)
