"""A candidate edit: new contents for some files of the workspace, and where it came from."""

from __future__ import annotations

import difflib
import fnmatch
import functools
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress, count
from operator import ne
from typing import Literal

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


# The policy stage's rules a project may turn off with `[tool.ralph] allow = [...]`: what no fix
# needs and a forged verdict does (validators/policy.py says what each refuses).
POLICY_RULES = ("harness", "test-framework", "dynamic-code", "silencing", "installed-files", "ignored-files")
# The semantic stages' signs of a wrong fix, by the code a rejection names, that a project may turn
# off with `[tool.ralph] semantic_off = [...]` (validators/plausibility.py and the stages beside it).
SEMANTIC_RULES = (
    "ARG001",  # a function's parameter becomes unused
    "ARG002",  # a method's
    "F841",  # a variable
    "PLR0124",  # a name compared with itself
    "SIM114",  # two branches the same
    "RUF034",  # both arms of a conditional expression the same
    "flow-cut",  # a parameter cut from the result, a raise or an effect
    "swallowed",  # an added handler that hides any failure
    "special-case",  # an input compared with the failing test's literal, or its expected value returned
    "deleted-behaviour",  # a statement a passing test ran, deleted with nothing in its place
)


def is_protected(path: str, patterns: Iterable[str]) -> bool:
    """Whether a project-relative path matches one of the glob `patterns` (`fnmatch.fnmatch` of
    each: one expression of them all, made once per set of patterns, since a suite's protected
    files can be hundreds and every candidate asks about each path it edits twice)."""
    return _any_of(tuple(patterns))(os.path.normcase(path)) is not None


@functools.lru_cache(maxsize=32)
def _any_of(patterns: tuple[str, ...]) -> Callable[[str], re.Match[str] | None]:
    if not patterns:
        return lambda _: None
    return re.compile("|".join(fnmatch.translate(os.path.normcase(p)) for p in patterns)).match


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


def squash(changes: Iterable[FileChange]) -> tuple[FileChange, ...]:
    """Changes applied in order as one change per file (its first `before`, its last `after`),
    leaving out the files they leave as they were."""
    merged: dict[str, FileChange] = {}
    for change in changes:
        first = merged.get(change.path, change)
        merged[change.path] = FileChange(change.path, first.before, change.after)
    return tuple(c for c in merged.values() if c.before != c.after)


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

    @functools.cached_property
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
        for line in _trimmed_diff(before, after, src, dst):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


@functools.lru_cache(maxsize=16)
def lines_of(text: str) -> tuple[str, ...]:
    """`text.splitlines()`, once per text: a candidate's checks (the policy, the test selection) each
    read the lines of the file it edits and of the accepted text, ~0.2 ms a split of a 100 KB module
    (tabulate's), a dozen times a candidate."""
    return tuple(text.splitlines())


@functools.lru_cache(maxsize=16)
def line_edits(before: str, after: str, autojunk: bool = False) -> tuple[tuple[str, int, int, int, int], ...]:
    """difflib's non-equal opcodes between two texts' lines (its junk heuristic only with
    `autojunk`), as 0-based absolute ranges; the lines both share at the start and the end are left
    out of the diff first."""
    old, new = lines_of(before), lines_of(after)
    head, tail = shared_ends(old, new)
    middle = difflib.SequenceMatcher(
        None, old[head : len(old) - tail], new[head : len(new) - tail], autojunk=autojunk
    )
    return tuple(
        (tag, i1 + head, i2 + head, j1 + head, j2 + head)
        for tag, i1, i2, j1, j2 in middle.get_opcodes()
        if tag != "equal"
    )


def shared_ends(before: Sequence[object], after: Sequence[object]) -> tuple[int, int]:
    """How many lines the two sides share at the start, and then at the end (never overlapping).
    (Compared in C up to the first line that differs: every candidate's checks ask this of the whole
    file it edits, a Python loop's millisecond in a 2,000-line module.)"""
    limit = min(len(before), len(after))
    head = next(compress(count(), map(ne, before, after)), limit)
    tail = next(compress(count(), map(ne, reversed(before), reversed(after))), limit)
    return head, min(tail, limit - head)


_TOKEN = re.compile(r"\w+|[^\w\s]")


# Beyond this many token pairs a hunk is sized by its longer side: a token diff of two large texts
# costs seconds (a whole-module rewrite), and a hunk that large is no candidate for "smallest" anyway.
_MAX_PAIRS = 250_000


def edit_size(changes: Sequence[FileChange]) -> int:
    """How much an edit changes: the tokens (each name or number, and each other character but
    space) it replaced, removed or added, hunk by hunk; a one-token swap is 1, wrapping a value in
    `abs()` 3, two swaps far apart 2. A deleted file counts its every token."""
    size = 0
    for change in changes:
        before, after = change.before or "", change.after or ""
        old, new = lines_of(before), lines_of(after)
        for _, i1, i2, j1, j2 in line_edits(before, after):
            size += _tokens_changed(
                _TOKEN.findall("\n".join(old[i1:i2])), _TOKEN.findall("\n".join(new[j1:j2]))
            )
    return size


def _tokens_changed(was: list[str], now: list[str]) -> int:
    if len(was) * len(now) > _MAX_PAIRS:
        return max(len(was), len(now))
    matcher = difflib.SequenceMatcher(None, was, now, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal")


def edited_lines(before: str, after: str) -> tuple[int, int]:
    """The 1-based lines of `after` between what both texts share at the start and at the end (a
    deletion: the line after it)."""
    old, new = lines_of(before), lines_of(after)
    head, tail = shared_ends(old, new)
    return head + 1, max(head + 1, len(new) - tail)


def _trimmed_diff(before: list[str], after: list[str], src: str, dst: str, n: int = 3) -> Iterator[str]:
    """difflib's unified diff, matching only the region between the lines both sides share at the
    start and the end: a one-token edit of a 3,000-line module matches a few lines, not all of them."""
    head, tail = shared_ends(before, after)
    middle = difflib.SequenceMatcher(None, before[head : len(before) - tail], after[head : len(after) - tail])
    opcodes: list[_Opcode] = [("equal", 0, head, 0, head)] if head else []
    opcodes += [
        (tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in middle.get_opcodes()
    ]
    if tail:
        opcodes.append(("equal", len(before) - tail, len(before), len(after) - tail, len(after)))
    first = True
    for group in _Matched(opcodes).get_grouped_opcodes(n):
        if first:
            yield f"--- {src}\n"
            yield f"+++ {dst}\n"
            first = False
        yield f"@@ -{_range(group[0][1], group[-1][2])} +{_range(group[0][3], group[-1][4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in before[i1:i2])
                continue
            yield from ("-" + line for line in before[i1:i2])
            yield from ("+" + line for line in after[j1:j2])


_Opcode = tuple[Literal["replace", "delete", "insert", "equal"], int, int, int, int]


class _Matched(difflib.SequenceMatcher[str]):
    """difflib's hunk grouping over opcodes already computed."""

    def __init__(self, opcodes: list[_Opcode]) -> None:
        super().__init__(None, [], [])
        self._known = opcodes

    def get_opcodes(self) -> list[_Opcode]:
        return self._known


def _range(start: int, stop: int) -> str:
    """A hunk's line range as unified diffs write it (difflib's format)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"
