"""A drafter: a `range(...)` on a suspicious line that stops one too early, or one too late."""

import ast

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.protocols import DraftContext


class RangeBound:
    name = "range-bound"
    remote = False  # it runs here: asked once for all its candidates
    priced = True  # at no cost

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        found = []
        for path, line in context.suspicious:
            if not path.endswith(".py"):
                continue
            before = (context.project / path).read_text()
            for end in stops(before, line):
                for shift in (" + 1", " - 1"):
                    change = FileChange(path, before, insert(before, end, shift))
                    edit = Candidate(self.name, f"range stop{shift} at {path}:{line}", (change,))
                    if edit.fingerprint not in context.rejected:  # rejected before: not again
                        found.append(edit)
        return found[:n]  # an empty list: nothing left to try on this state


def stops(source: str, line: int) -> list[tuple[int, int]]:
    """Where the stop argument of each `range(...)` on `line` ends: (line, column in bytes)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == line]
    ranges = [c for c in calls if isinstance(c.func, ast.Name) and c.func.id == "range" and c.args]
    stop = [c.args[0] if len(c.args) == 1 else c.args[1] for c in ranges]
    return [
        (a.end_lineno, a.end_col_offset)
        for a in stop
        if a.end_lineno is not None and a.end_col_offset is not None
    ]


def insert(source: str, at: tuple[int, int], text: str) -> str:
    lines = source.splitlines(keepends=True)
    row, column = at[0] - 1, at[1]
    encoded = lines[row].encode()
    lines[row] = (encoded[:column] + text.encode() + encoded[column:]).decode()
    return "".join(lines)
