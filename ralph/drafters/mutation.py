"""The offline drafter: template-based program repair at the lines the failing checks implicate.

Lint first goes to `ruff check --fix` (and `ruff format` when a failing check asks for it); then
single mutations (operator swaps, comparison flips, off-by-one, negations, substitutions, ...; one
edit made at every site of a shape the module repeats, as one) at the suspicious lines, in order of
the line's score (traceback frames, then Ochiai over per-test coverage, less for each line above it)
times the template's prior (how often it fixed a bug in the traces of `ralph bench fix` runs,
shipped as data; more when the failing assertion's values point to it: one off, the wrong way, a
sign); then, once those are spent, pairs of the simplest mutations of the most suspicious lines
(bounded).
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from ralph.domain.candidate import Candidate, FileChange, is_protected
from ralph.domain.protocols import DraftContext
from ralph.domain.pyast import literal_eval, parse
from ralph.drafters.mutation_ops import COSTS, Mutant, combine, generate_mutants
from ralph.drafters.priors import priors as template_priors
from ralph.drafters.priors import shipped
from ralph.drafters.queue import CandidateQueue
from ralph.sandboxes.workspace import read_text_beneath
from ralph.validators.toolchain import ruff_bin

# Two-edit candidates: the simplest few mutants of the most suspicious lines, paired, at most so many.
PAIR_LINES = 4
PAIR_PER_LINE = 6
MAX_PAIRS = 150
# A line's score is worth this much less for each line ranked above it: lines that tie on coverage
# (every line a lone failing test ran) keep some of their order (frames first, later lines first),
# so a likely template of a line far down waits for the likelier lines' own templates.
DECAY = 0.85


class MutationDrafter:
    """Proposes the next untried mutants for the current state; [] when all are spent.
    `priors`: each template's chance to fix a bug when tried (default: learned, shipped as data)."""

    name = "mutation"
    remote = False
    priced = True  # (free)

    def __init__(self, priors: Mapping[str, float] | None = None) -> None:
        self._queue = CandidateQueue(self._candidates)
        self._priors = dict(priors) if priors is not None else template_priors(shipped(), COSTS)
        self._unknown = min(self._priors.values(), default=1.0)  # a template with no prior

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        return self._queue.take(context, n)

    def _candidates(self, context: DraftContext) -> Iterator[Candidate]:
        yield from _lint_fixes(context)
        sources: dict[str, str | None] = {}

        def read(path: str) -> str | None:  # each file once per state
            if path not in sources:
                sources[path] = read_text_beneath(context.project, path) if path.endswith(".py") else None
            return sources[path]

        ranked = ranked_lines(context, read)
        expected = compared_strings(context)
        hints = value_hints(context)
        by_path: dict[str, list[int]] = {}
        for path, line, _ in ranked:
            if not is_protected(path, context.protected) and read(path) is not None:
                by_path.setdefault(path, []).append(line)
        rank = {(path, line): i for i, (path, line, _) in enumerate(ranked)}
        scored = bool(context.suspicion)  # (without scores, line by line in rank order)
        found: list[tuple[int, float, int, str, Mutant]] = []  # (tier, -score x prior, rank, path, mutant)
        for path, at in by_path.items():
            for mutant in generate_mutants(read(path) or "", at, expected):
                i = rank[(path, mutant.at)]
                key = -ranked[i][2] * DECAY**i * self._prior(mutant.operator, hints)
                found.append((0 if scored else i, key, i, path, mutant))
        for *_, path, mutant in sorted(found, key=lambda f: f[:3]):  # (stable: ties as made)
            yield Candidate(
                drafter=self.name,
                description=f"{path}:{mutant.description}",
                changes=(FileChange(path, mutant.original, mutant.source),),
                meta={"operator": mutant.operator},
            )
        yield from self._pairs(_pool(found), read)

    def _prior(self, operator: str, hints: Mapping[str, float]) -> float:
        return self._priors.get(operator, self._unknown) * hints.get(operator, 1.0)

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


def _pool(found: list[tuple[int, float, int, str, Mutant]]) -> list[tuple[int, str, Mutant]]:
    """The mutants paired once single edits are spent: the simplest few (in the order they were
    made) of each of the most suspicious lines that have any."""
    pool: list[tuple[int, str, Mutant]] = []
    per_line: dict[int, int] = {}
    for _, _, rank, path, mutant in sorted(found, key=lambda f: f[2]):  # (stable: as made)
        if rank not in per_line and len(per_line) >= PAIR_LINES:
            break
        per_line[rank] = per_line.get(rank, 0) + 1
        if per_line[rank] <= PAIR_PER_LINE:
            pool.append((rank, path, mutant))
    return pool


def ranked_lines(context: DraftContext, read: Callable[[str], str | None]) -> list[tuple[str, int, float]]:
    """(path, line, score), most suspicious first: the suspicious lines, then the lines of ruff's
    findings it cannot fix (scored as the least suspicious line), with `def` lines put in (scored
    as the line that brought them, see `with_def_lines`)."""
    scores: dict[tuple[str, int], float] = {}
    for key, score in zip(context.suspicious, context.suspicion, strict=False):
        scores.setdefault(key, score)  # (a line listed twice keeps its first, best, score)
    floor = min(scores.values(), default=1.0)
    lint = [(d.path, d.line) for d in context.diagnostics if d.tool == "ruff" and not d.fixable]
    scores |= {key: floor for key in lint if key not in scores}
    lines = list(dict.fromkeys([*context.suspicious, *lint]))
    out = []
    for path, line in with_def_lines(lines, read):
        if (path, line) not in scores:  # a def line: the score of its function's best line
            last = max((e for f, e in _functions(read(path)) or () if f == line), default=line)
            inside = [s for (p, n), s in scores.items() if p == path and line < n <= last]
            scores[(path, line)] = max(inside, default=floor)
        out.append((path, line, scores[(path, line)]))
    return out


# What a failing assertion's two values say of the fix, as the templates that make such a change
# (their priors multiplied by HINT): an answer one off, a truth value the wrong way, a sign flipped.
HINT = 3.0
_OFF_BY_ONE = (
    "const_off_by_one",
    "index_off_by_one",
    "slice_off_by_one",
    "span_off_by_one",
    "compare_flip",
    "drop_arg",
)
_WRONG_WAY = (
    "negate_condition",
    "remove_not",
    "bool_const_flip",
    "compare_flip",
    "boolop_swap",
    "flip_returns",
)
_SIGN = ("binop_swap", "unary_remove", "swap_operands")
_COMPARED = re.compile(r"^E?\s*(?:AssertionError: )?assert (.+) == (.+)$")


def value_hints(context: DraftContext) -> dict[str, float]:
    """Multipliers of template priors from the values the failing tests' assertions compared
    (`assert 4 == 5`: one off; `assert True == False`: the wrong way; `assert -2 == 2`: a sign;
    lists one item apart: a bound one off)."""
    hints: dict[str, float] = {}
    for test in context.failing_tests[:MAX_EXPECTED]:
        for line in test.message.splitlines():
            if (match := _COMPARED.match(line.strip())) is None:
                continue
            got, want = (_value(side) for side in match.groups())
            if isinstance(got, bool) and isinstance(want, bool):
                hints |= dict.fromkeys(_WRONG_WAY, HINT)
            elif isinstance(got, int | float) and isinstance(want, int | float):
                try:
                    if abs(got - want) == 1:
                        hints |= dict.fromkeys(_OFF_BY_ONE, HINT)
                    elif got == -want != 0:
                        hints |= dict.fromkeys(_SIGN, HINT)
                except OverflowError:  # (an int too large to subtract a float from)
                    pass
            elif "contains one more item" in test.message:
                hints |= dict.fromkeys(_OFF_BY_ONE, HINT)
    return hints


def _value(text: str) -> object:
    try:
        return literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def with_def_lines(
    ranked: list[tuple[str, int]], read: Callable[[str], str | None], after: int = 2
) -> list[tuple[str, int]]:
    """`ranked` with the `def` line of each suspicious line's function after that function's first
    `after` lines (or its only one), the innermost function's first: coverage never ranks a `def`
    line (it ran at import), and that is where a wrong default is, and what a forgotten `return`
    hangs on."""
    functions: dict[str, tuple[tuple[int, int], ...] | None] = {}
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


@functools.lru_cache(maxsize=8)
def _functions(source: str | None) -> tuple[tuple[int, int], ...] | None:
    """The (def line, last line) of every function in `source` (each file parsed once per state:
    `with_def_lines` and `ranked_lines` both ask)."""
    try:
        tree = parse(source) if source is not None else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is None:
        return None
    return tuple(
        (n.lineno, n.end_lineno or n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    )


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
