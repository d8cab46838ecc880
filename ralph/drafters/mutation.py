"""The offline drafter: template-based program repair at the lines the failing checks implicate.

Lint first goes to `ruff check --fix` (and `ruff format` when a failing check asks for it); then single
mutations (operator swaps, comparison flips, off-by-one, negations, substitutions, ...) at the suspicious
lines, most suspicious line first, simplest mutation first; then, once those are spent, pairs of the
simplest mutations of the most suspicious lines (bounded).
"""

from __future__ import annotations

import ast
import itertools
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from ralph.domain.candidate import Candidate, FileChange, is_protected
from ralph.domain.protocols import DraftContext
from ralph.drafters.mutation_ops import Mutant, combine, generate_mutants
from ralph.drafters.queue import CandidateQueue
from sandboxes.workspace import read_text_beneath
from validators.toolchain import ruff_bin

# Two-edit candidates: the simplest few mutants of the most suspicious lines, paired, at most so many.
PAIR_LINES = 4
PAIR_PER_LINE = 6
MAX_PAIRS = 150


class MutationDrafter:
    """Proposes the next untried mutants for the current state; [] when all are spent."""

    name = "mutation"

    def __init__(self) -> None:
        self._queue = CandidateQueue(self._candidates)

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        return self._queue.take(context, n)

    def _candidates(self, context: DraftContext) -> Iterator[Candidate]:
        yield from _lint_fixes(context)
        lines = [(d.path, d.line) for d in context.diagnostics if d.tool == "ruff" and not d.fixable]
        sources: dict[str, str | None] = {}

        def read(path: str) -> str | None:  # each file once per state
            if path not in sources:
                sources[path] = read_text_beneath(context.project, path) if path.endswith(".py") else None
            return sources[path]

        expected = compared_strings(context)
        pool: list[tuple[int, str, Mutant]] = []  # (rank of its line, path, mutant), to pair later
        for rank, (path, line) in enumerate(with_def_lines([*context.suspicious, *lines], read)):
            if is_protected(path, context.protected) or (source := read(path)) is None:
                continue
            mutants = generate_mutants(source, [line], expected)
            if mutants and len({r for r, _, _ in pool}) < PAIR_LINES:
                pool += [(rank, path, m) for m in mutants[:PAIR_PER_LINE]]
            for mutant in mutants:
                yield Candidate(
                    drafter=self.name,
                    description=f"{path}:{mutant.description}",
                    changes=(FileChange(path, source, mutant.source),),
                    meta={"operator": mutant.operator},
                )
        yield from self._pairs(pool, read)

    def _pairs(
        self, pool: list[tuple[int, str, Mutant]], read: Callable[[str], str | None]
    ) -> Iterator[Candidate]:
        """Two edits at once, once every single one was tried: the pooled mutants paired (edits that
        overlap or do not parse together aside), most suspicious lines and simplest mutants first."""
        pairs = sorted(
            itertools.combinations(pool, 2), key=lambda p: (p[0][2].cost + p[1][2].cost, p[0][0] + p[1][0])
        )
        made = 0
        for (_, path_a, a), (_, path_b, b) in pairs:
            source_a, source_b = read(path_a), read(path_b)
            if source_a is None or source_b is None:
                continue
            changes: tuple[FileChange, ...]
            if path_a == path_b:
                both = combine(source_a, a, b)
                if both is None:
                    continue
                changes = (FileChange(path_a, source_a, both),)
            else:
                changes = (FileChange(path_a, source_a, a.source), FileChange(path_b, source_b, b.source))
            description = f"{path_a}:{a.description} and {path_b}:{b.description}"
            yield Candidate(self.name, description, changes, meta={"operator": "pair"})
            made += 1
            if made >= MAX_PAIRS:
                return


# A short printable string literal in a failing test's message.
_QUOTED = re.compile(r"'([^'\\\n]{1,40})'" + r'|"([^"\\\n]{1,40})"')
MAX_EXPECTED = 6


def compared_strings(context: DraftContext) -> list[str]:
    """The strings the failing tests' assertions compared (`assert 'colour' == 'color'`): what a
    wrong string constant may have been meant to be, when the module has no such constant."""
    found: dict[str, None] = {}
    for test in context.failing_tests:
        for line in test.message.splitlines():
            if "assert" not in line and "==" not in line:
                continue
            for match in _QUOTED.finditer(line):
                text = match.group(1) if match.group(1) is not None else match.group(2)
                if text.isprintable():
                    found[text] = None
    return list(found)[:MAX_EXPECTED]


def with_def_lines(
    ranked: list[tuple[str, int]], read: Callable[[str], str | None], after: int = 2
) -> list[tuple[str, int]]:
    """`ranked` with the `def` line of each suspicious line's function after that function's first
    `after` lines (or its only one), the innermost function's first: coverage never ranks a `def`
    line (it ran at import), and that is where a wrong default is, and what a forgotten `return`
    hangs on."""
    functions: dict[str, list[tuple[int, int]] | None] = {}
    seen: dict[tuple[str, int], int] = {}  # a function's suspicious lines so far
    out: list[tuple[str, int]] = []
    pending: dict[tuple[str, int], None] = {}
    for path, line in ranked:
        out.append((path, line))
        if path not in functions:
            functions[path] = _functions(read(path))
        inside = [(first, last) for first, last in functions[path] or () if first < line <= last]
        for first, _last in sorted(inside, reverse=True):  # innermost first
            key = (path, first)
            seen[key] = seen.get(key, 0) + 1
            pending[key] = None
            if seen[key] == after:
                out.append(key)
                pending.pop(key, None)
    out += [key for key in pending if key not in out]  # functions with fewer suspicious lines
    return list(dict.fromkeys(out))


def _functions(source: str | None) -> list[tuple[int, int]] | None:
    """The (def line, last line) of every function in `source`."""
    try:
        tree = ast.parse(source) if source is not None else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is None:
        return None
    return [
        (n.lineno, n.end_lineno or n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def _lint_fixes(context: DraftContext) -> Iterator[Candidate]:
    """`ruff check --fix` over files with fixable diagnostics, `ruff format` when a check wants it."""
    fixable = sorted({d.path for d in context.diagnostics if d.tool == "ruff" and d.fixable})
    wants_format = any("ruff format" in c for c in context.failing_checks)
    commands: list[tuple[str, list[str], list[str]]] = [
        ("ruff --fix", ["check", "--fix-only", "--exit-zero"], fixable)
    ]
    if wants_format:
        commands.append(("ruff format", ["format"], _unformatted(context.project)))
    for label, args, paths in commands:
        changes = []
        for path in paths:
            if is_protected(path, context.protected):
                continue
            before = read_text_beneath(context.project, path)
            if before is None:
                continue
            after = _ruff(context.project, [*args, "--stdin-filename", path, "-"], before)
            if after is not None and after != before:
                changes.append(FileChange(path, before, after))
        if changes:
            description = f"{label} on {', '.join(c.path for c in changes)}"
            yield Candidate(
                "mutation", description, tuple(changes), meta={"operator": label.replace(" ", "_")}
            )


def _ruff(project: Path, args: list[str], stdin: str) -> str | None:
    proc = subprocess.run(
        [ruff_bin(), *args], cwd=project, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    return proc.stdout if proc.returncode == 0 else None


def _unformatted(project: Path) -> list[str]:
    proc = subprocess.run(
        [ruff_bin(), "format", "--check", "--no-cache", "."],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    prefix = "Would reformat: "
    return [line[len(prefix) :].strip() for line in proc.stdout.splitlines() if line.startswith(prefix)]
