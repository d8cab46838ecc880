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

import ast
import logging
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import griffe

from ralph.domain.candidate import FileChange, shared_ends
from ralph.domain.pyast import locked, parse
from ralph.domain.results import Diagnostic, StageResult, elapsed_ms

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

Spans = list[tuple[int, int]]

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


@dataclass(frozen=True)
class _Shape:
    """What the API check needs of an accepted text, read once (ast, not griffe)."""

    bodies: Spans  # function bodies an edit inside cannot change the API from (`inside_a_body`)
    main: Spans  # `if __name__ == "__main__":` blocks: a script's variables, no API
    statements: Spans  # the top-level statements, decorators included
    exports: frozenset[int]  # the lines of the top-level statements that mention `__all__`


class ApiValidator:
    """The breaking changes of the changed public modules (`reason_off`: why it never looks).

    griffe reads only the top-level statements the edit touched, before and after (the rest of the
    module blanked out, `__all__` kept); only when that shows a break are the whole texts compared,
    so the reason is exact and a name defined twice is not taken for removed."""

    name = "api"

    def __init__(self, project: Path, *, allowed: bool = False) -> None:
        self.allowed = allowed
        self.reason_off = "API changes are allowed" if allowed else api_surface(project)
        self._shapes: dict[tuple[str, int], _Shape | None] = {}  # the accepted texts, read once

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
            shape = self._shape(change.path, change.before)
            if shape is None:  # the accepted text does not parse: nothing to compare against
                continue
            checked.append((self.name, change.path))
            if change.after is None:
                found.append(Diagnostic(self.name, change.path, 1, "module-removed", f"removes `{name}`"))
                continue
            if len(change.after) > _MAX_TEXT:
                continue
            edited = edited_lines(change.before, change.after)
            if inside_a_body(edited, shape.bodies):
                continue  # only lines inside one function's body changed: no signature did
            try:
                found += self._breaks(name, change.path, change.before, change.after, shape, edited)
            except Exception as exc:  # griffe could not compare them: no verdict, never a pass
                why = f"griffe could not compare {change.path}: {type(exc).__name__}: {exc}"
                return StageResult(self.name, ok=False, duration_ms=elapsed_ms(start), detail=why, error=why)
        detail = "; ".join(f"{d.path}:{d.line}: {d.message}" for d in found)
        return StageResult(
            self.name,
            ok=not found,
            duration_ms=elapsed_ms(start),
            detail=detail or ("nothing public changed" if checked else "no public module changed"),
            diagnostics=found,
            checked=checked,
            skipped=not checked,
        )

    def _breaks(
        self, name: str, path: str, before: str, after: str, shape: _Shape, edited: tuple[int, int]
    ) -> list[Diagnostic]:
        old_part, new_part = touched(before, after, shape, edited)
        old, new = _visit(name, path, old_part), _visit(name, path, new_part)
        if old is not None and new is not None and not breaks(old, new, path, shape.main):
            return []
        old, new = _visit(name, path, before), _visit(name, path, after)
        if old is None or new is None:  # (a text that does not parse is the syntax stage's to reject)
            return []
        return breaks(old, new, path, shape.main)

    def _shape(self, path: str, text: str) -> _Shape | None:
        key = (path, hash(text))
        if key not in self._shapes:
            if len(self._shapes) > 256:
                self._shapes.clear()
            self._shapes[key] = _read_shape(text)
        return self._shapes[key]


def edited_lines(before: str, after: str) -> tuple[int, int]:
    """The lines (first, last, 1-based) of `before` the edit changed; last < first: an insertion
    before line `first`."""
    old = before.splitlines()
    head, tail = shared_ends(old, after.splitlines())
    return head + 1, len(old) - tail


def touched(before: str, after: str, shape: _Shape, edited: tuple[int, int]) -> tuple[str, str]:
    """`before` and `after` with every line blanked but those of the top-level statements the edit
    (`edited_lines`) touched and the statements that mention `__all__`: line numbers are kept."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    first, last = edited
    low, high = (first, last) if last >= first else (first - 1, first)
    spans = [(a, b) for a, b in shape.statements if a <= high and low <= b]
    start = min([first, *(a for a, _ in spans)])
    end = max([last, *(b for _, b in spans)])
    delta = len(new) - len(old)
    old_part = [line if start <= i <= end or i in shape.exports else "\n" for i, line in enumerate(old, 1)]
    new_part = [
        line if start <= i <= end + delta or (i - delta if i > end + delta else i) in shape.exports else "\n"
        for i, line in enumerate(new, 1)
    ]
    return "".join(old_part), "".join(new_part)


def _read_shape(text: str) -> _Shape | None:
    """The shape of `text`; None when it does not parse. Function bodies count when the body starts
    on a line of its own (every line of the signature is above it), `__init__` and what it holds left
    out (griffe reads a class's attributes from the assignments to `self` there)."""
    try:
        tree = parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = text.splitlines()
    statements: Spans = []
    exports: set[int] = set()
    main: Spans = []
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        last = node.end_lineno or node.lineno
        statements.append((first, last))
        if any("__all__" in lines[i - 1] for i in range(first, last + 1)):
            exports.update(range(first, last + 1))
        if isinstance(node, ast.If) and _is_main(node.test):
            main.append((first, last))
    bodies = []
    todo: list[ast.AST] = [tree]
    while todo:
        parent = todo.pop()
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if child.name == "__init__":
                    continue
                body = child.body[0]
                if body.lineno > child.lineno and not lines[body.lineno - 1][: body.col_offset].strip():
                    bodies.append((body.lineno, child.end_lineno or body.lineno))
            todo.append(child)
    return _Shape(bodies, main, statements, frozenset(exports))


def _is_main(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def inside_a_body(edited: tuple[int, int], bodies: Spans) -> bool:
    """Whether every line the edit changed (`edited_lines`), or the place it inserted at, lies in one
    function body."""
    first, last = edited
    if last < first:
        return any(low <= first <= high for low, high in bodies)
    return any(low <= first and last <= high for low, high in bodies)


def _visit(name: str, path: str, text: str) -> griffe.Module | None:
    try:
        # griffe builds trees too (ralph.domain.pyast says why one at a time)
        return locked(lambda: griffe.visit(name, Path(path), code=text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def breaks(old: griffe.Module, new: griffe.Module, path: str, main: Spans | None = None) -> list[Diagnostic]:
    """The API breaks from `old` to `new`, each said as what the edit does to a caller."""
    found = [b for b in griffe.find_breaking_changes(old, new) if b.kind in _BREAKS]
    # A parameter removed or added moves the ones after it: the move is not a break of its own.
    resized = {b.obj.path for b in found if b.kind is not griffe.BreakageKind.PARAMETER_MOVED}
    found = [
        b
        for b in found
        if (b.kind is not griffe.BreakageKind.PARAMETER_MOVED or b.obj.path not in resized)
        and not _harmless(b, old)
        and not any(low <= _line(b) <= high for low, high in main or ())
    ]
    out = []
    for b in found:
        where = b.obj.path.removeprefix(old.path + ".")
        out.append(Diagnostic("api", path, _line(b), b.kind.name.lower(), _say(b, where)))
    return out


def _line(b: griffe.Breakage) -> int:
    """The line of the object the break is in (an alias griffe cannot resolve: its own line)."""
    try:
        return int(b.obj.lineno or 1)
    except griffe.GriffeError:
        return int(getattr(b.obj, "alias_lineno", None) or 1)


def _harmless(b: griffe.Breakage, old: griffe.Module) -> bool:
    """A change griffe lists that no caller trips on: `self`/`cls` going or coming as a method becomes
    static or a class method, or a positional-only parameter renamed (callers cannot name it)."""
    param = b.old_value if b.kind is griffe.BreakageKind.PARAMETER_REMOVED else b.new_value
    name = getattr(param, "name", None)
    kinds = (griffe.BreakageKind.PARAMETER_REMOVED, griffe.BreakageKind.PARAMETER_ADDED_REQUIRED)
    if b.kind not in kinds or name is None:
        return False
    try:
        before = getattr(old[b.obj.path.removeprefix(old.path + ".")], "parameters")  # noqa: B009
        after = getattr(b.obj, "parameters")  # noqa: B009
    except (KeyError, AttributeError, griffe.GriffeError):
        return False
    removed = b.kind is griffe.BreakageKind.PARAMETER_REMOVED
    this, other = (before, after) if removed else (after, before)
    names = [p.name for p in this]
    if name in ("self", "cls") and names[:1] == [name]:
        return True
    # The same place on the other side holds a positional-only parameter of another name: a rename.
    index = names.index(name) if name in names else len(other)
    positional = griffe.ParameterKind.positional_only
    return (
        getattr(param, "kind", None) is positional
        and index < len(other)
        and other[index].kind is positional
        and other[index].name not in names
    )


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
