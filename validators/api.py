"""Does the edit keep the public API? griffe reads each changed public module before and after the
candidate (statically: its AST, nothing of the candidate runs) and lists what a caller of the old
version would trip on: a public function, class, method or attribute removed (or renamed), a
parameter removed, moved, made required (its default removed), of another kind, a required one
added, a base class removed, an object that became another kind.

A changed default or a module constant's value is no break here (that is what many fixes change), nor
a changed annotation (the type checker judges those).

When it runs (`api_surface`): the project publishes a package (a `[project]` or `[tool.poetry]` table
in pyproject.toml, or a setup.py / setup.cfg), and the changed file is one of its public modules: a
`.py` file outside tests, docs, examples, scripts and benchmarks, with no path part that starts with
an underscore (`__init__.py` aside). An application or a folder of scripts has no API to keep.
"""

from __future__ import annotations

import logging
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import griffe

from ralph.domain.candidate import FileChange
from ralph.domain.results import Diagnostic, StageResult

_BREAKS = {
    griffe.BreakageKind.OBJECT_REMOVED,
    griffe.BreakageKind.OBJECT_CHANGED_KIND,
    griffe.BreakageKind.PARAMETER_REMOVED,
    griffe.BreakageKind.PARAMETER_MOVED,
    griffe.BreakageKind.PARAMETER_CHANGED_KIND,
    griffe.BreakageKind.PARAMETER_CHANGED_REQUIRED,
    griffe.BreakageKind.PARAMETER_ADDED_REQUIRED,
    griffe.BreakageKind.CLASS_REMOVED_BASE,
}
_NOT_API = {
    "tests",
    "test",
    "testing",
    "docs",
    "doc",
    "examples",
    "example",
    "scripts",
    "benchmarks",
    "bench",
}
_NOT_MODULES = {"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "manage.py", "tasks.py"}
_MAX_TEXT = 2 << 20  # a file this large is not read (a generated module)

logging.getLogger("griffe").setLevel(logging.CRITICAL)  # its warnings on odd code are not ours to show


def api_surface(project: Path) -> str | None:
    """None when `project` publishes a package (its API is kept), else why it has none."""
    pyproject = project / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8")) if pyproject.is_file() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        data = {}
    if "project" in data or "poetry" in data.get("tool", {}):
        return None
    if (project / "setup.py").is_file() or (project / "setup.cfg").is_file():
        return None
    return "no public package (no [project] in pyproject.toml, no setup.py or setup.cfg)"


def public_module(path: str) -> str | None:
    """The dotted name of the public module at `path`, or None when it is not part of the API."""
    parts = PurePosixPath(path).parts
    if not path.endswith(".py") or parts[-1] in _NOT_MODULES or parts[-1].startswith("test_"):
        return None
    if parts[0] == "src":
        parts = parts[1:]
    if not parts or any(p in _NOT_API for p in parts[:-1]) or parts[-1].endswith("_test.py"):
        return None
    names = [*parts[:-1], parts[-1][:-3]]
    if names[-1] == "__init__":
        names.pop()
    if not names or any(n.startswith("_") or not n.isidentifier() for n in names):
        return None
    return ".".join(names)


class ApiValidator:
    """The breaking changes of the changed public modules (`reason_off`: why it never looks)."""

    name = "api"

    def __init__(self, project: Path, *, allowed: bool = False) -> None:
        self.allowed = allowed
        self.reason_off = "API changes are allowed" if allowed else api_surface(project)
        self._before: dict[tuple[str, int], griffe.Module | None] = {}  # the accepted texts, read once

    @property
    def enabled(self) -> bool:
        return self.reason_off is None

    def check(self, changes: Sequence[FileChange]) -> StageResult:
        start = time.perf_counter()
        found: list[Diagnostic] = []
        checked = []
        for change in changes:
            name = public_module(change.path)
            if name is None or change.before is None or len(change.before) > _MAX_TEXT:
                continue  # not API, or a new file (nothing to break)
            old = self._module(name, change.path, change.before)
            if old is None:  # the accepted text does not parse: nothing to compare against
                continue
            checked.append((self.name, change.path))
            if change.after is None:
                found.append(Diagnostic(self.name, change.path, 1, "module-removed", f"removes `{name}`"))
                continue
            new = _visit(name, change.path, change.after) if len(change.after) <= _MAX_TEXT else None
            if new is not None:  # (one that does not parse is the syntax stage's to reject)
                found += breaks(old, new, change.path)
        detail = "; ".join(f"{d.path}:{d.line}: {d.message}" for d in found)
        return StageResult(
            self.name,
            ok=not found,
            duration_ms=(time.perf_counter() - start) * 1000,
            detail=detail or ("nothing public changed" if checked else "no public module changed"),
            diagnostics=found,
            checked=checked,
            skipped=not checked,
        )

    def _module(self, name: str, path: str, text: str) -> griffe.Module | None:
        key = (path, hash(text))
        if key not in self._before:
            if len(self._before) > 256:
                self._before.clear()
            self._before[key] = _visit(name, path, text)
        return self._before[key]


def _visit(name: str, path: str, text: str) -> griffe.Module | None:
    try:
        return griffe.visit(name, Path(path), code=text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def breaks(old: griffe.Module, new: griffe.Module, path: str) -> list[Diagnostic]:
    """The API breaks from `old` to `new`, each said as what the edit does to a caller."""
    found = [b for b in griffe.find_breaking_changes(old, new) if b.kind in _BREAKS]
    # A parameter removed or added moves the ones after it: the move is not a break of its own.
    resized = {b.obj.path for b in found if b.kind is not griffe.BreakageKind.PARAMETER_MOVED}
    found = [
        b for b in found if b.kind is not griffe.BreakageKind.PARAMETER_MOVED or b.obj.path not in resized
    ]
    out = []
    for b in found:
        where = b.obj.path.removeprefix(old.path + ".")
        out.append(Diagnostic("api", path, b.obj.lineno or 1, b.kind.name.lower(), _say(b, where)))
    return out


def _say(b: griffe.Breakage, where: str) -> str:
    kind = griffe.BreakageKind
    param = getattr(b.old_value, "name", None) or getattr(b.new_value, "name", "")
    if b.kind is kind.PARAMETER_REMOVED:
        return f"removes parameter `{param}` of `{where}`"
    if b.kind is kind.PARAMETER_MOVED:
        return f"moves parameter `{param}` of `{where}`"
    if b.kind is kind.PARAMETER_CHANGED_KIND:
        return f"changes parameter `{param}` of `{where}` from {b.old_value.kind.value} to {b.new_value.kind.value}"
    if b.kind is kind.PARAMETER_CHANGED_REQUIRED:
        return f"makes parameter `{param}` of `{where}` required (its default is gone)"
    if b.kind is kind.PARAMETER_ADDED_REQUIRED:
        return f"adds a required parameter `{param}` to `{where}`"
    if b.kind is kind.CLASS_REMOVED_BASE:
        removed = b.old_value if isinstance(b.old_value, list) else [b.old_value]
        return f"removes base class `{', '.join(map(str, removed))}` of `{where}`"
    if b.kind is kind.OBJECT_CHANGED_KIND:
        return f"makes `{where}` {_article(_kind(b.new_value))} (it was {_article(_kind(b.old_value))})"
    return f"removes public `{where}`"


def _kind(value: object) -> str:
    return str(getattr(value, "value", value))


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"
