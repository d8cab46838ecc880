"""Which tests a change can affect (pure): per-test coverage at function granularity, and an import
graph for everything coverage cannot vouch for (module-level code, uncovered code, new files)."""

from __future__ import annotations

import ast
import functools
import itertools
import keyword
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ralph.domain.candidate import FileChange, line_edits, lines_of
from ralph.domain.pyast import parse
from ralph.sandboxes.workspace import read_beneath

CoverageMap = dict[str, dict[str, list[int]]]  # test node id -> project-relative path -> lines executed
COLLECTION = "<collection>"
_SPAWN_TOKENS = (
    "subprocess",
    "sys.executable",
    "os.system",
    "multiprocessing",
    "Popen",
    "pexpect",
)  # pseudo-test: lines executed while pytest imported the test modules


class CoverageIndex:
    """A coverage map turned around: for each file, the tests that ran each line. Built once per
    map, it answers a candidate's question in microseconds, where scanning the whole map per
    candidate took milliseconds (docs/measurements.md)."""

    def __init__(self, coverage: Mapping[str, Mapping[str, Iterable[int]]]) -> None:
        self.source = coverage
        self._by_line: dict[str, dict[int, list[str]]] = {}
        self.footprint: dict[str, int] = {}  # how many lines each test ran
        for test, files in coverage.items():
            ran = 0
            for path, lines in files.items():
                by_line = self._by_line.setdefault(path, {})
                for line in lines:
                    by_line.setdefault(line, []).append(test)
                    ran += 1
            self.footprint[test] = ran

    def tests_running(self, path: str, lines: Iterable[int]) -> dict[str, None]:
        """The tests (in map order, the collection pseudo-test included) that ran any of `lines`."""
        by_line = self._by_line.get(path, {})
        found: dict[str, None] = {}
        for line in lines:
            found.update(dict.fromkeys(by_line.get(line, ())))
        return found


@dataclass
class Selection:
    """The tests to run, and why each part was chosen (for the trace)."""

    tests: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    everything: bool = False  # the change can affect anything: run the whole suite
    # Some of the change is beyond what coverage vouches for (module-level or import-time code, code
    # no test ran, a new file, test code): its tests came from the import graph, which a lazy import
    # escapes. Then no failing test counts as unaffected.
    by_imports: bool = False
    # Names from the changed lines and their functions: tests named after them run first, so a
    # fail-fast run of a broken candidate stops after one test, not after the whole module.
    words: list[str] = field(default_factory=list)
    # The tests that ran a changed line itself, the narrowest (fewest lines run) first: they run
    # before those that only entered its function, which cannot see a change of a line they never
    # ran (a third of pyflakes' mutants ran hundreds of such tests before one failed).
    near: list[str] = field(default_factory=list)


MAX_NEAR = 400  # (node ids passed to the test process in its environment)
_NEVER_SOURCES = frozenset({"__pycache__", "node_modules"})


def project_sources(root: Path, skip: Iterable[str] = (), limit: int | None = None) -> dict[str, str]:
    """The project's Python files by root-relative POSIX path, outside hidden and generated folders
    (and the `skip` ones), in path order, at most `limit` of them."""
    excluded = _NEVER_SOURCES | set(skip)
    sources: dict[str, str] = {}
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root)
        if any(part.startswith(".") or part in excluded for part in rel.parts):
            continue
        # Through no link and never blocking on a FIFO named like a module (a test may have left one).
        data = read_beneath(root, rel.as_posix())
        if data is None:
            continue
        sources[rel.as_posix()] = data.decode("utf-8", errors="replace")
        if limit is not None and len(sources) >= limit:
            break
    return sources


def module_name(path: str) -> str | None:
    """The dotted module a project-relative .py path defines (`src/` layouts included)."""
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return None
    parts = list(p.with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


def imports_of(path: str, source: str) -> set[str]:
    """Every module `source` may import, with their parent packages (which importing runs)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return set()
    own = module_name(path) or ""
    package = own if path.endswith("__init__.py") else own.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([base] if base else [])])
            if base:
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
    with_parents: set[str] = set()
    for name in found:
        parts = name.split(".")
        with_parents.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return with_parents


class ImportGraph:
    """Reverse imports between the project's own modules."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        # Code run in a child process (a CLI test through subprocess, multiprocessing) is invisible
        # to in-process coverage and imports: such files are selected by the names they mention.
        self.spawners = {p: src for p, src in sources.items() if any(t in src for t in _SPAWN_TOKENS)}
        self.module_of = {path: m for path in sources if (m := module_name(path))}
        self.path_of = {m: path for path, m in self.module_of.items()}
        self.importers: dict[str, set[str]] = {}
        for path, source in sources.items():
            for target in imports_of(path, source) & self.path_of.keys():
                self.importers.setdefault(self.path_of[target], set()).add(path)

    def spawning_mentions(self, path: str) -> set[str]:
        """Files that start Python processes and mention the top-level package `path` belongs to."""
        top = (module_name(path) or "").split(".")[0]
        return {p for p, src in self.spawners.items() if top and top in src}

    def dependents(self, path: str) -> set[str]:
        """Files that import `path`, directly or transitively (`path` included)."""
        seen, todo = {path}, [path]
        while todo:
            for importer in self.importers.get(todo.pop(), ()):
                if importer not in seen:
                    seen.add(importer)
                    todo.append(importer)
        return seen


@dataclass(frozen=True)
class _Definition:
    first: int  # the `def`/`class` line
    body: int  # the first line of the body
    last: int
    name: str
    function: bool


@functools.lru_cache(maxsize=512)  # (as many as the policy's `READ_AHEAD`)
def _outline(source: str) -> tuple[tuple[_Definition, ...], tuple[tuple[int, int, str], ...]]:
    """Every function and class, and every label (`_labels`), innermost (shortest) first, from one
    parse. Cached: every candidate of one state parses the same sources, and a large module's parse
    is not cheap (docs/measurements.md)."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return (), ()
    definitions: list[_Definition] = []
    labels: list[tuple[int, int, str]] = []

    def label(name: object, node: ast.expr | ast.stmt, first: int | None = None) -> None:
        if isinstance(name, str) and _WORD.fullmatch(name) and name not in _NOT_WORDS:
            labels.append((first or node.lineno, node.end_lineno or node.lineno, name))

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            last = node.end_lineno or node.body[-1].lineno
            function = not isinstance(node, ast.ClassDef)
            definitions.append(_Definition(node.lineno, node.body[0].lineno, last, node.name, function))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant):
                    label(key.value, value, key.lineno)
        elif isinstance(node, ast.keyword):
            label(node.arg, node.value, node.lineno)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                label(getattr(target, "id", None), node)
    return (
        tuple(sorted(definitions, key=lambda d: d.last - d.first)),
        tuple(sorted(labels, key=lambda found: found[1] - found[0])),
    )


def read_ahead(source: str) -> None:
    """Outline an accepted file once for all its candidates, before the first one that edits it."""
    _outline(source)


def _definitions(source: str) -> tuple[_Definition, ...]:
    """Every function and class, innermost (shortest) first."""
    return _outline(source)[0]


def _labels(source: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, name) of what a line sits in: a dict's entry under a string key, a
    call's keyword argument, an assignment's target; the innermost first. A test of a line outside
    functions is often named after it (`"rst": TableFormat(...)` in a table of formats: `test_rst`)."""
    return _outline(source)[1]


def _function_spans(source: str) -> list[tuple[int, int]]:
    """(first body line, last line) of every function, innermost first; lines outside them run
    at import time."""
    return [(d.body, d.last) for d in _definitions(source) if d.function]


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_NOT_WORDS = frozenset(keyword.kwlist) | {"self", "cls", "test", "tests", "None", "True", "False"}


def change_words(change: FileChange, limit: int = 60) -> list[str]:
    """Names a test of the changed code is likely named after: the identifiers (and words inside
    string literals) on the changed lines, before and after, and the function enclosing them."""
    before = lines_of(change.before or "")
    after = lines_of(change.after or "")
    found: dict[str, None] = {}
    text: list[str] = []
    for _tag, i1, i2, j1, j2 in line_edits(change.before or "", change.after or ""):
        text += before[i1:i2] + after[j1:j2]
        at = i1 + 1  # the first changed line (1-based), or the line an insertion precedes
        enclosing = (d.name for d in _definitions(change.before or "") if d.first <= at <= d.last)
        if name := next(enclosing, None):
            found[name.strip("_")] = None
        else:  # (outside every function and class: the entry, keyword or name the line belongs to)
            spans = _labels(change.before or "")
            labels = (n for first, last, n in spans if first <= at <= last and not _dunder(n))
            found.update(dict.fromkeys(n.strip("_") for n in itertools.islice(labels, 3)))
    for line in text:
        for word in _WORD.findall(_code(line)):
            if word not in _NOT_WORDS and not _dunder(word):
                found[word.strip("_")] = None
                found.update(dict.fromkeys(_runs(word)))
    found.pop("", None)
    return [w for w in found if len(w) >= 3][:limit]


def _code(line: str) -> str:
    """A line without its comment (`# basic types` names no test); a `#` inside quotes stays."""
    quote = ""
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif quote and char == "\\":
            escaped = True
        elif char in "\"'":
            quote = "" if quote == char else quote or char
        elif char == "#" and not quote:
            return line[:i]
    return line


def _dunder(word: str) -> bool:
    """`__all__`, `__name__`: the language's names, not the change's (`all` names too many tests)."""
    return len(word) > 4 and word.startswith("__") and word.endswith("__")


def _runs(word: str) -> list[str]:
    """The shorter runs of a snake_case name's parts (`six_moves_urllib_parse` -> `six_moves`,
    `urllib_parse`, ...): a test is often named after a part of a long name."""
    parts = [p for p in word.split("_") if p]
    return [
        "_".join(parts[i : i + n]) for n in range(len(parts) - 1, 1, -1) for i in range(len(parts) - n + 1)
    ]


def changed_lines(change: FileChange) -> set[int]:
    """Lines of `before` (1-based) that the change replaces or deletes, or inserts next to."""
    lines: set[int] = set()
    for tag, i1, i2, _j1, _j2 in line_edits(change.before or "", change.after or ""):
        if tag == "insert":  # between lines i1 and i1 + 1 (1-based): both neighbours count
            lines.update(n for n in (i1, i1 + 1) if n >= 1)
        else:
            lines.update(range(i1 + 1, i2 + 1))
    return lines


def select_tests(
    changes: Sequence[FileChange],
    coverage: Mapping[str, Mapping[str, Iterable[int]]] | CoverageIndex,
    graph: ImportGraph,
    is_test_file: Callable[[str], bool],
) -> Selection:
    """The tests that executed a changed function, plus, for changes coverage cannot vouch for, every
    test module (or conftest directory) that imports the changed module transitively."""
    index = coverage if isinstance(coverage, CoverageIndex) else CoverageIndex(coverage)
    selection = Selection()
    chosen: dict[str, None] = {}
    late: dict[str, None] = {}
    near: dict[str, None] = {}
    fallback: set[str] = set()
    for change in changes:
        path = change.path
        if not path.endswith(".py"):
            selection.everything = True
            selection.reasons.append(f"{path}: not Python, anything may read it")
            continue
        if is_test_file(path) or change.before is None:
            fallback.add(path)
            selection.reasons.append(f"{path}: {'new file' if change.before is None else 'test code'}")
            continue
        spawners = sorted(p for p in graph.spawning_mentions(path) if is_test_file(p))
        if spawners:
            late.update(dict.fromkeys(spawners))  # slow (they start processes): run them last
            selection.reasons.append(
                f"{path}: {len(spawners)} test files run Python processes that may import it"
            )
        selection.words += [w for w in change_words(change) if w not in selection.words]
        spans = _function_spans(change.before)
        for line in sorted(changed_lines(change)):
            span = next((s for s in spans if s[0] <= line <= s[1]), None)
            if span is None:
                fallback.add(path)
                selection.reasons.append(f"{path}:{line}: module-level code")
                continue
            ran = index.tests_running(path, range(span[0], span[1] + 1))
            near.update(index.tests_running(path, [line]))
            at_import = COLLECTION in ran
            runners = sorted(t for t in ran if t != COLLECTION)
            chosen.update(dict.fromkeys(runners))
            if at_import or not runners:
                fallback.add(path)
                why = "runs at import time" if at_import else "no test executed it"
                selection.reasons.append(f"{path}:{line}: {why}")
            else:
                selection.reasons.append(f"{path}:{line}: {len(runners)} tests executed the function")
    selection.by_imports = bool(fallback)
    chosen.update(_importers(fallback, graph, is_test_file))
    selection.tests = list({**chosen, **late})
    near.pop(COLLECTION, None)
    selection.near = sorted(near, key=lambda t: index.footprint.get(t, 0))[:MAX_NEAR]
    return selection


def named_after(words: Sequence[str], tests: Iterable[str], limit: int = 16) -> list[str]:
    """The `tests` whose names (past the file) hold one of `words`, the rarest word's first (as our
    plugin orders a run), `limit` at most."""
    lowered = [w.lower() for w in words if w]
    if not lowered:
        return []
    any_word = re.compile("|".join(map(re.escape, lowered)))  # (one scan per name: suites are large)
    names = {t: name for t in tests if any_word.search(name := t.partition("::")[2].lower())}
    held = {t: [w for w in lowered if w in name] for t, name in names.items()}
    count = {w: sum(w in found for found in held.values()) for w in lowered}
    ranked = sorted(names, key=lambda t: min(count[w] for w in held[t]))  # (stable: pytest's order)
    return ranked[:limit]


def _importers(paths: set[str], graph: ImportGraph, is_test_file: Callable[[str], bool]) -> dict[str, None]:
    """The test modules (or conftest directories) that import any of `paths` transitively."""
    found: dict[str, None] = {}
    for path in sorted(paths):
        for dependent in sorted(graph.dependents(path)):
            if PurePosixPath(dependent).name == "conftest.py":
                directory = str(PurePosixPath(dependent).parent)
                found[directory if directory != "." else "."] = None
            elif is_test_file(dependent):
                found[dependent] = None
    return found
