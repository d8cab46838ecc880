"""Deleted behaviour: an edit that removes a statement or a branch some passing test ran at the
baseline, and puts nothing in its place.

A sign of a fix shaped to the failing test rather than to the bug: the failing test stops failing
once the check that raised, the update it tripped on or the branch it took is gone, and the passing
tests that also ran that code never looked at what it did (had they, the gate would see them fail).
A pure reading of the two texts and of which lines of the text before the edit each passing test ran
(`deletions`), and the stage that gives it the baseline's per-test coverage (`DeletedBehaviourStage`).

What counts as removed: the lines of a hunk that deletes and adds nothing, or adds only what does
nothing (blank lines, comments, `pass`, `...`: a branch whose body became `pass`, a statement turned
into a comment, is deleted all the same). A hunk that puts other code there is a replacement, judged by
the tests and the other semantic stages, not here. Not deleted either:

- a statement the edit moved (its lines are among those it added elsewhere);
- a compound statement whose header alone ran (an `if` no passing test entered): evaluating a
  condition that led nowhere is no behaviour they ran; the statements inside are what counts;
- a `return`, `raise`, `break` or `continue` with statements after it in its block that the edit
  kept: those could never run, so removing it brings code back to life rather than taking it away
  (the true fix of a return a bug added early in a function).
"""

from __future__ import annotations

import ast
import difflib
import re
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from ralph.domain.candidate import shared_ends
from ralph.domain.results import Diagnostic, StageResult, findings_result
from ralph.validators.dataflow import parsed
from ralph.validators.selection import CoverageIndex
from ralph.validators.stages import Attempt

CODE = "deleted-behaviour"
_MAX_TEXT = 2 << 20  # a file this large is not read (a generated module)
_ELIF = re.compile(r"^(\s*)elif\b")
_JUMPS = (ast.Return, ast.Raise, ast.Break, ast.Continue)


@dataclass(frozen=True)
class Deletion:
    """Code of the text before the edit that the edit removed, which passing tests ran."""

    what: str  # as a reader names it: "`total += x`", "the `elif n < 0:` branch"
    line: int  # its first line in the text before the edit
    tests: tuple[str, ...]  # the passing tests that ran it at the baseline

    def message(self) -> str:
        ran = self.tests[0]
        if len(self.tests) > 1:
            ran += f" and {len(self.tests) - 1} other passing test{'s' if len(self.tests) > 2 else ''}"
        return f"the edit deletes {self.what} (line {self.line}) that {ran} ran at the baseline, with nothing in its place"


def deletions(before: str, after: str, ran: Mapping[int, Collection[str]]) -> list[Deletion]:
    """The statements, branches and handlers inside functions of `before` that the edit to `after`
    removed with nothing in their place, and that a passing test ran: `ran` maps a line of `before`
    to the passing tests that ran it at the baseline. None where `before` does not parse."""
    old = lines_of(before)
    removed, added = _removed(old, lines_of(after))
    if not removed:  # (most edits: no parse of a large module)
        return []
    try:
        tree = parsed(before)
    except (SyntaxError, ValueError, RecursionError):
        return []
    found = []
    for unit, what, statements in _units(tree, old, removed):
        if _moved(old, unit, added):
            continue
        tests = {t for line in _body_lines(statements) for t in ran.get(line, ())}
        if tests:
            found.append(Deletion(what, unit[0], tuple(sorted(tests))))
    return found


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def lines_of(text: str) -> list[str]:
    """The lines of `text` as Python and coverage count them (`str.splitlines` also splits at a form
    feed and other breaks: every line after one would be off by one)."""
    return _LINE_BREAK.split(text)


def _code(line: str) -> str:
    """A line without its comment and spaces (what a moved statement keeps when it is reflowed or
    given a comment)."""
    return re.sub(r"\s+", "", line.split("#", 1)[0])


def _removed(old: list[str], new: list[str]) -> tuple[set[int], str]:
    """The lines of `old` (1-based) that hunks with nothing in their place removed, and the code the
    edit added anywhere (`_code` of its lines, joined: a statement moved and reflowed is found in
    it)."""
    head, tail = shared_ends(old, new)
    # (an `elif` that became an `if` is the same line: the branch before it was deleted)
    was = [_ELIF.sub(r"\1if", line) for line in old[head : len(old) - tail]]
    now = [_ELIF.sub(r"\1if", line) for line in new[head : len(new) - tail]]
    removed: set[int] = set()
    added: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, was, now, autojunk=False).get_opcodes():
        if tag == "equal":  # (a line the edit left in place puts nothing back)
            continue
        put = [line.strip() for line in now[j1:j2]]
        added += [_code(line) for line in put]
        if tag == "delete" or (tag == "replace" and all(_nothing(line) for line in put)):
            removed.update(range(head + i1 + 1, head + i2 + 1))
    return removed, "".join(added)


def _nothing(line: str) -> bool:
    """A line that does nothing: blank, a comment, `pass`, `...`."""
    return not line or line.startswith("#") or line in ("pass", "...")


_Unit = tuple[int, int]  # a removed piece's first and last line


def _units(
    tree: ast.Module, old: list[str], removed: set[int]
) -> Iterator[tuple[_Unit, str, list[ast.stmt]]]:
    """The outermost removed pieces inside functions: (its lines, what to call it, its statements)."""
    low, high = min(removed), max(removed)
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            first, last = _span(function)
            # (a function the edit removed nothing of is not read; one it removed whole is no
            # behaviour deleted inside a function: an override dropped so the base's applies)
            if first <= high and low <= last and not _within((first, last), removed):
                yield from _in_block(function.body, old, removed)


def _in_block(
    block: list[ast.stmt], old: list[str], removed: set[int]
) -> Iterator[tuple[_Unit, str, list[ast.stmt]]]:
    for i, statement in enumerate(block):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue  # (a nested function is read as a function of its own)
        span = _span(statement)
        if _within(span, removed):
            if not _does_nothing(statement) and not _revives(statement, block[i + 1 :], removed):
                yield span, _name(statement, old), [statement]
            continue
        if isinstance(statement, ast.If):
            yield from _branches(statement, old, removed)
            continue
        for handler in getattr(statement, "handlers", []) or []:
            if _within(_span(handler), removed):
                caught = "except" if handler.type is None else f"except {ast.unparse(handler.type)}"
                yield _span(handler), f"the `{caught}` handler", handler.body
            else:
                yield from _in_block(handler.body, old, removed)
        for field in ("body", "orelse", "finalbody"):
            yield from _in_block(getattr(statement, field, []) or [], old, removed)
        for case in getattr(statement, "cases", []) or []:
            yield from _in_block(case.body, old, removed)


def _branches(node: ast.If, old: list[str], removed: set[int]) -> Iterator[tuple[_Unit, str, list[ast.stmt]]]:
    """An `if` the edit kept in part: a branch it removed (its line and its body), or what it
    removed inside each."""
    body = (node.lineno, _span(node.body[-1])[1])
    if _within(body, removed):
        yield body, f"the `{old[node.lineno - 1].strip()}` branch", node.body
    else:
        yield from _in_block(node.body, old, removed)
    if _else_removed(node, old, removed):
        branch = (node.orelse[0].lineno - 1, _span(node.orelse[-1])[1])  # (from the `else:` line)
        yield branch, f"the `else` branch of `{old[node.lineno - 1].strip()}`", node.orelse
    else:
        yield from _in_block(node.orelse, old, removed)


def _span(node: ast.stmt | ast.ExceptHandler) -> _Unit:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first, node.end_lineno or node.lineno


def _within(span: _Unit, removed: set[int]) -> bool:
    return all(line in removed for line in range(span[0], span[1] + 1))


def _else_removed(node: ast.If, old: list[str], removed: set[int]) -> bool:
    """An `else:` branch (not an `elif`) removed with its line."""
    if not node.orelse or _is_elif(node.orelse[0], old):
        return False
    start = node.orelse[0].lineno - 1
    return (
        0 < start <= len(old)
        and old[start - 1].strip().startswith("else")
        and _within((start, _span(node.orelse[-1])[1]), removed)
    )


def _is_elif(node: ast.stmt, old: list[str]) -> bool:
    return isinstance(node, ast.If) and old[node.lineno - 1].lstrip().startswith("elif")


def _name(statement: ast.stmt, old: list[str]) -> str:
    first = old[statement.lineno - 1].strip()
    if _is_elif(statement, old):
        return f"the `{first}` branch"
    if len(first) > 60:
        first = first[:57] + "..."
    return f"`{first}`"


def _does_nothing(statement: ast.stmt) -> bool:
    """`pass`, a docstring, `...`: nothing to lose."""
    return isinstance(statement, ast.Pass) or (
        isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
    )


def _body_lines(statements: list[ast.stmt]) -> Iterator[int]:
    """The lines of the simple statements among `statements` and inside them (never a compound
    statement's header: a test that only evaluated an `if`'s condition ran nothing of its branch)."""
    for statement in statements:
        inner = [
            *(getattr(statement, field, []) or [] for field in ("body", "orelse", "finalbody")),
            *(h.body for h in getattr(statement, "handlers", []) or []),
            *(c.body for c in getattr(statement, "cases", []) or []),
        ]
        if any(inner):
            for block in inner:
                yield from _body_lines(block)
        elif not _does_nothing(statement):
            first, last = _span(statement)
            yield from range(first, last + 1)


def _moved(old: list[str], unit: _Unit, added: str) -> bool:
    """The removed code put back elsewhere by the edit, reflowed or commented or not (a statement
    moved, not deleted)."""
    code = "".join(_code(line) for line in old[unit[0] - 1 : unit[1]] if not _nothing(line.strip()))
    return bool(code) and code in added


def _revives(statement: ast.stmt, after: list[ast.stmt], removed: set[int]) -> bool:
    """A jump with statements after it in its block that the edit kept: they could never run before,
    so taking it out brings them to life."""
    return isinstance(statement, _JUMPS) and any(not _within(_span(s), removed) for s in after)


def removed_lines(before: str, after: str) -> set[int]:
    """The lines of `before` the edit removed with nothing in their place (`deletions` reads only
    these: most edits have none)."""
    return _removed(lines_of(before), lines_of(after))[0]


def ran_by(
    index: CoverageIndex, path: str, lines: Collection[int], passing: Collection[str]
) -> dict[int, list[str]]:
    """For each of `lines` of `path`, the `passing` tests that ran it (the coverage's own order)."""
    return {line: [t for t in index.tests_running(path, (line,)) if t in passing] for line in lines}


@dataclass
class DeletedBehaviourStage:
    """Code some passing test ran that the edit deletes with nothing in its place (`deletions`), in
    the files whose accepted text is still the one the baseline's coverage was measured on (an
    accepted edit changed the others since: its lines say nothing of them). Without per-test
    coverage it says it did not look; it never fails a candidate for that. `plausibility = "warn"`
    says what it found instead of rejecting; `semantic_off` holding its code turns it off."""

    name: str = CODE

    def wanted(self, attempt: Attempt) -> bool:
        settings = attempt.context.settings
        return settings.plausibility != "off" and CODE not in settings.semantic_off

    def run(self, attempt: Attempt) -> StageResult:
        start = time.perf_counter()
        impact = attempt.context.impact
        if not impact.coverage:
            why = "skipped: the run has no per-test coverage of the baseline to say what the tests ran"
            return StageResult(self.name, ok=True, duration_ms=0.0, skipped=True, detail=why)
        passing = attempt.current.passing_tests()
        found: list[Diagnostic] = []
        checked: list[tuple[str, str]] = []
        unseen: list[str] = []
        for change in attempt.candidate.changes:
            before, after = change.before, change.after
            if not change.path.endswith(".py") or before is None or after is None or len(before) > _MAX_TEXT:
                continue
            if change.path in impact.accepted_paths:
                unseen.append(change.path)
                continue
            checked.append((self.name, change.path))
            removed = removed_lines(before, after)
            if not removed:
                continue
            ran = ran_by(impact.index(), change.path, removed, passing)
            found += [
                Diagnostic(self.name, change.path, d.line, CODE, d.message())
                for d in deletions(before, after, ran)
            ]
        why = f"not read: {', '.join(unseen)} (changed by an accepted edit since the coverage was measured)"
        warn = attempt.context.settings.plausibility == "warn"
        nothing = "nothing deleted that a passing test ran"
        notes = [why] if unseen else []
        result = findings_result(
            self.name, found, warn=warn, start=start, checked=checked, notes=notes, nothing=nothing
        )
        result.skipped = not checked
        return result
