"""Per-test coverage across a run: cached between runs by content, moved along with accepted edits."""

from __future__ import annotations

import difflib
import hashlib
import json
import sys
from pathlib import Path

from ralph.domain.candidate import FileChange, shared_ends
from ralph.validators.policy import PYTEST_CONFIG_FILES
from ralph.validators.selection import CoverageMap


class CoverageCache:
    """The baseline's coverage map, kept in `directory` under a key of everything it depends on:
    every Python file and test config of the project, and the interpreter. Unrelated changes
    (environment variables, other files) keep the cache."""

    def __init__(self, directory: Path, project: Path, python: str) -> None:
        self.directory, self.project, self.python = directory, project, python
        self._path: Path | None = None

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = self.directory / f"coverage-{content_key(self.project, self.python)}.json"
        return self._path

    def load(self) -> CoverageMap | None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def store(self, coverage: CoverageMap) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(coverage))


def content_key(project: Path, python: str) -> str:
    """A digest of the project's Python files and test configs, and the interpreter."""
    digest = hashlib.sha256(f"{python}\0{sys.version}\0".encode())
    for file in sorted(project.rglob("*")):
        rel = file.relative_to(project)
        if any(p.startswith(".") or p == "__pycache__" for p in rel.parts) or not file.is_file():
            continue
        if file.suffix in (".py", ".pyi") or file.name in PYTEST_CONFIG_FILES:
            digest.update(rel.as_posix().encode() + b"\0" + hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()[:24]


def remap_coverage(coverage: CoverageMap, changes: tuple[FileChange, ...]) -> CoverageMap:
    """Coverage with line numbers moved to where an accepted edit put them; a covered line inside a
    replaced region marks the whole new region as covered (conservative for test selection)."""
    maps = {c.path: _LineMap(c) for c in changes if c.before is not None and c.after is not None}
    if not maps:
        return coverage
    remapped: CoverageMap = {}
    for test, files in coverage.items():
        remapped[test] = {
            path: sorted({n for line in lines for n in maps[path](line)}) if path in maps else lines
            for path, lines in files.items()
        }
    return remapped


class _LineMap:
    """Old line number -> new line numbers for one edit. The lines the edit kept before and after
    its changed region map by offset; only that region is diffed, so an accepted one-line edit in a
    120,000-line module costs a prefix/suffix scan, not a whole-file diff."""

    def __init__(self, change: FileChange) -> None:
        before = (change.before or "").splitlines()
        after = (change.after or "").splitlines()
        head, tail = shared_ends(before, after)
        self.head, self.old_end, self.delta = head, len(before) - tail, len(after) - len(before)
        self.middle: dict[int, tuple[int, ...]] = {}
        old, new = before[head : len(before) - tail], after[head : len(after) - tail]
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
            for k, i in enumerate(range(i1, i2)):
                span = (head + j1 + k + 1,) if tag == "equal" else tuple(range(head + j1 + 1, head + j2 + 1))
                self.middle[head + i + 1] = span

    def __call__(self, line: int) -> tuple[int, ...]:
        if line <= self.head:
            return (line,)
        if line > self.old_end:
            return (line + self.delta,)
        return self.middle.get(line, ())
