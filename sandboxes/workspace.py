"""A private copy of the user's project where candidates are applied, checked and rolled back."""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from ralph.candidate import FileChange


class UnsafePath(ValueError):
    """An edit aimed outside the workspace, into .git, or through a symlink."""


class Workspace:
    """Files of the project, copied from the snapshot; `.git` is never inside."""

    def __init__(self, root: Path, subdir: str = "") -> None:
        self.root = root.resolve()
        self.project = (self.root / subdir).resolve() if subdir else self.root
        self._mtimes: dict[Path, int] = {}

    def resolve(self, path: str) -> Path:
        """The absolute file for a project-relative `path`, refusing anything that could escape."""
        rel = Path(path)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise UnsafePath(f"{path}: edits must use a relative path inside the project")
        if any(part.lower() == ".git" for part in rel.parts):
            raise UnsafePath(f"{path}: edits under .git are not allowed")
        target = self.project / rel
        probe = self.project
        for part in rel.parts:
            probe = probe / part
            if probe.is_symlink():
                raise UnsafePath(f"{path}: edits through symlinks are not allowed")
        return target

    def read(self, path: str) -> str | None:
        file = self.resolve(path)
        try:
            return file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def apply(self, changes: Sequence[FileChange]) -> None:
        """Write every change's `after`, all or nothing: paths are checked before anything is written,
        and a write that fails (a path both a file and a directory, say) undoes the ones before it."""
        targets = [self.resolve(c.path) for c in changes]
        done: list[FileChange] = []
        try:
            for change, target in zip(changes, targets, strict=True):
                self._write(target, change.after)
                done.append(change)
        except OSError as exc:
            self.revert(done)
            raise UnsafePath(f"the edit cannot be written: {exc.strerror or exc}") from None

    def revert(self, changes: Sequence[FileChange]) -> None:
        """Put back every change's `before`."""
        for change in changes:
            self._write(self.resolve(change.path), change.before)

    def _write(self, target: Path, content: str | None) -> None:
        if content is None:
            target.unlink(missing_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        old = target.stat() if target.exists() else None
        mode = stat.S_IMODE(old.st_mode) if old else None
        target.write_text(content, encoding="utf-8", newline="")
        if mode is not None:
            os.chmod(target, mode)
        # Python's bytecode cache trusts (mtime in whole seconds, size): two same-size edits within a
        # second would reuse stale bytecode. Each write gets a later whole second than the last one.
        last = self._mtimes.get(target, int(old.st_mtime) if old else 0)
        second = max(int(time.time()), last + 1)
        self._mtimes[target] = second
        os.utime(target, ns=(second * 1_000_000_000, second * 1_000_000_000))

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
