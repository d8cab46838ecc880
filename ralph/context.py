"""What a model drafter is told (pure): the task, the failing checks, the code they implicate (with
line numbers), and what was already tried and why it was rejected."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ralph.domain.protocols import DraftContext
from ralph.domain.pyast import parse
from ralph.sandboxes.workspace import read_beneath

MAX_MESSAGE_CHARS = 1500
MAX_SNIPPET_LINES = 80


@dataclass(frozen=True)
class Snippet:
    """A region of a file around suspicious lines, usually the enclosing function."""

    path: str
    start: int  # 1-based, inclusive
    end: int
    text: str  # the lines start..end, without line numbers

    def numbered(self) -> str:
        lines = self.text.splitlines()
        return "\n".join(f"{self.start + i:>5} | {line}" for i, line in enumerate(lines))


def trim_message(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A failure message cut to what matters: its head (where) and its tail (the assertion)."""
    message = message.strip()
    if len(message) <= limit:
        return message
    head = limit // 3
    return message[:head] + "\n[...]\n" + message[-(limit - head) :]


def _enclosing_span(source: str, line: int) -> tuple[int, int]:
    """The innermost function (with decorators) around `line`, else a window of lines around it."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        tree = None
    best: tuple[int, int] | None = None
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if start <= line <= node.end_lineno and (
                best is None or node.end_lineno - start < best[1] - best[0]
            ):
                best = (start, node.end_lineno)
    if best and best[1] - best[0] < MAX_SNIPPET_LINES:
        return best
    return max(1, line - 10), line + 10


def localize(project: Path, suspicious: Sequence[tuple[str, int]], limit: int = 4) -> list[Snippet]:
    """The functions around the most suspicious lines, merged per file, at most `limit` snippets.
    Files outside the project or reached through symlinks are never read."""
    root = project.resolve()
    snippets: list[Snippet] = []
    for path, line in suspicious:
        if len(snippets) >= limit:
            break
        if any(s.path == path and s.start <= line <= s.end for s in snippets):
            continue
        data = read_beneath(root, path)  # never through a link, never outside the project
        if data is None:
            continue
        source = data.decode("utf-8", errors="replace")
        start, end = _enclosing_span(source, line)
        lines = source.splitlines()
        end = min(end, len(lines))
        snippets.append(Snippet(path, start, end, "\n".join(lines[start - 1 : end])))
    return snippets


def render(context: DraftContext) -> str:
    """The draft context as text for a model."""
    parts = [f"# Task\n{context.task or 'Make the failing checks pass without breaking anything else.'}"]
    if context.failing_tests:
        parts.append("# Failing tests")
        for test in context.failing_tests[:5]:
            parts.append(f"## {test.nodeid}\n{trim_message(test.message)}")
        if len(context.failing_tests) > 5:
            parts.append(f"(and {len(context.failing_tests) - 5} more failing tests)")
    if context.failing_checks:
        parts.append("# Failing checks\n" + "\n".join(f"- `{c}`" for c in context.failing_checks))
    snippets = localize(context.project, context.suspicious)
    if snippets:
        parts.append("# Code the failures point at (line numbers for reference only)")
        parts += [f"## {s.path}\n```python\n{s.numbered()}\n```" for s in snippets]
    if context.best_rejected:
        diff, why = context.best_rejected
        parts.append(
            "# The closest attempt so far (repair it rather than start over)\n"
            f"```diff\n{diff.strip()}\n```\nIt failed: {why}"
        )
    if context.attempts:
        parts.append("# Already tried and rejected (do not repeat these)")
        parts += [f"```diff\n{diff.strip()}\n```\nRejected: {why}" for diff, why in context.attempts[-5:]]
    if context.protected:
        parts.append("Do not edit test files.")
    return "\n\n".join(parts)
