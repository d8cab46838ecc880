"""A candidate edit: new contents for some files of the workspace, and where it came from."""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

# Drafters may not edit tests (unless the user allows it): a "fix" that rewrites the test is no fix.
PROTECTED_TESTS = (
    "test_*.py",
    "*/test_*.py",
    "*_test.py",
    "tests/*",
    "*/tests/*",
    "test/*",
    "*/test/*",
    "conftest.py",
    "*/conftest.py",
)


def is_protected(path: str, patterns: Iterable[str]) -> bool:
    """Whether a project-relative path matches one of the glob `patterns`."""
    return any(fnmatch.fnmatch(path, p) for p in patterns)


@dataclass(frozen=True)
class FileChange:
    """One file's contents before and after an edit; `after=None` deletes the file."""

    path: str  # POSIX path relative to the project directory
    before: str | None
    after: str | None

    def inverse(self) -> FileChange:
        """The change that undoes this one."""
        return FileChange(self.path, self.after, self.before)


def undoing(changes: Iterable[FileChange]) -> tuple[FileChange, ...]:
    """The changes that undo `changes` (applied in order), last first."""
    return tuple(c.inverse() for c in reversed(list(changes)))


@dataclass(frozen=True)
class Candidate:
    """An edit proposed by a drafter, not yet verified."""

    drafter: str
    description: str
    changes: tuple[FileChange, ...]
    draft_ms: float = 0.0
    tokens: int | None = None
    cost_usd: float | None = None
    error: str | None = None  # a draft that could not be turned into an edit, said for the model
    meta: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    @property
    def paths(self) -> list[str]:
        return [c.path for c in self.changes]

    @property
    def diff(self) -> str:
        return unified_diff(self.changes)

    @property
    def fingerprint(self) -> str:
        """Identity of the edit itself, so identical proposals are verified once."""
        h = hashlib.sha256()
        for c in sorted(self.changes, key=lambda c: c.path):
            h.update(c.path.encode() + b"\0" + (c.after or "\0deleted").encode() + b"\0")
        return h.hexdigest()[:16]


def unified_diff(changes: tuple[FileChange, ...] | list[FileChange]) -> str:
    """A git-style unified diff of the changes (paths prefixed a/ and b/)."""
    out: list[str] = []
    for c in changes:
        before = (c.before or "").splitlines(keepends=True)
        after = (c.after or "").splitlines(keepends=True)
        src = f"a/{c.path}" if c.before is not None else "/dev/null"
        dst = f"b/{c.path}" if c.after is not None else "/dev/null"
        for line in difflib.unified_diff(before, after, src, dst, n=3):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
