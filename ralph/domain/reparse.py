"""A statement as an edit left it, from a parse of only the innermost statement the edit changed.

A one-line edit of a method of a 1,800-line class (pyflakes' `Checker`) is, top-level statement by
top-level statement, an edit of the whole class: reading what it changed parsed the class again,
~13 ms a candidate. `reparsed` parses only the innermost statement around the edit (a method, an
`if` in it, a line of it), in place (its lines and columns as in the whole file), and puts it where
the old one was in a copy of the path down to it.

It is used only where that cannot differ from the statement parsed out of the whole new text: every
changed region kept its number of lines (so every line keeps its number), all of them lie inside one
statement nested in the top-level one that owns its lines (they parse alone to it: no header of a
one-line compound statement, no sibling after a `;`), and those lines of the new text, parsed alone
under a header of their own, are one statement of the same kind beginning where the old one did. Python's grammar
reads a statement the same wherever it stands (what may stand where is the compiler's to say); the
text before it is untouched, so a statement starts there as it did; and one that no longer ends
within its old lines (an open bracket, a dedent) fails to parse alone or parses as more than one.
Otherwise None: the caller parses the top-level statement whole, as before."""

from __future__ import annotations

import ast
import copy
from collections.abc import Sequence

from ralph.domain.pyast import parse

_BLOCKS = ("body", "orelse", "finalbody", "handlers")  # (not a match's cases: read whole)


# What `str.splitlines` ends a line at besides "\n" (Python's tokenizer ends one at "\r" too, but
# at none of the others: a form feed, a page break in older modules, would number lines apart).
_OTHER_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def lines_as_python_numbers_them(text: str) -> bool:
    """Whether `text.splitlines()` numbers the lines as Python's parser does (only "\n" ends them)."""
    return not any(c in text for c in _OTHER_BREAKS)


def first_line(node: ast.stmt) -> int:
    """A statement's first line, its decorators included."""
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def reparsed(
    top: ast.stmt, before: Sequence[str], after: Sequence[str], changed: Sequence[tuple[int, int]]
) -> ast.stmt | None:
    """`top`, a statement of the accepted text (whose lines are `before`), as the edit left it,
    where the edit replaced the lines of `changed` (1-based, inclusive, each region by as many lines)
    to give `after` (both numbered as Python numbers them: `lines_as_python_numbers_them`); None
    where that is not the innermost statement's parse (see the module)."""
    path = _path(top, changed) if changed else []
    if not path:
        return None
    parent, field, index = path[-1]
    old = getattr(parent, field)[index]
    first, last = first_line(old), old.end_lineno or old.lineno
    if first < 2 or last > min(len(before), len(after)):
        return None
    # The old statement owns its lines (no header of a one-line `def h(exec): ...` around it, no
    # sibling after a `;`): its lines alone are it. Otherwise what the edit kept of those would be
    # read as it was, not as the new text has it.
    if (mine := _alone(before, first, last)) is None or _dump(mine) != _dump(old):
        return None
    statement = _alone(after, first, last)
    # The same kind of statement where the old one began (not the line's `def f(): return x` when
    # the old one was its `return x`).
    if statement is None or type(statement) is not type(old) or _start(statement) != _start(old):
        return None
    new: ast.AST = statement
    for parent, field, index in reversed(path):  # (the accepted tree is shared: copied, never changed)
        clone = copy.copy(parent)
        items = list(getattr(parent, field))
        if _end(parent) == _end(items[index]):  # (it ended with the old one: it ends with the new one)
            clone.end_lineno, clone.end_col_offset = _end(new)  # type: ignore[attr-defined]
        items[index] = new
        setattr(clone, field, items)
        new = clone
    assert isinstance(new, ast.stmt)
    return new


def _alone(lines: Sequence[str], first: int, last: int) -> ast.stmt | None:
    """Lines `first`..`last` parsed alone, numbered as in the whole, under a header line of their own:
    the one statement they are, or None."""
    text = "\n" * (first - 2) + "class _:\n" + "\n".join(lines[first - 1 : last]) + "\n"
    try:
        tree = parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    header = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(header, ast.ClassDef) or len(header.body) != 1:
        return None
    return header.body[0]


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=True)


def _start(node: ast.AST) -> tuple[int | None, int | None]:
    return getattr(node, "lineno", None), getattr(node, "col_offset", None)


def _end(node: ast.AST) -> tuple[int | None, int | None]:
    return getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)


def _path(top: ast.AST, changed: Sequence[tuple[int, int]]) -> list[tuple[ast.AST, str, int]]:
    """(node, field, index) from `top` down to the innermost statement below it whose lines hold
    every changed line (an except clause is not one); empty where there is none."""
    path: list[tuple[ast.AST, str, int]] = []
    found = 0  # how much of `path` ends at a statement
    node = top
    while (step := _child_holding(node, changed)) is not None:
        path.append(step)
        node = getattr(step[0], step[1])[step[2]]
        if isinstance(node, ast.stmt):
            found = len(path)
    return path[:found]


def _child_holding(node: ast.AST, changed: Sequence[tuple[int, int]]) -> tuple[ast.AST, str, int] | None:
    """The statement (or except clause) right below `node` whose lines hold every changed line."""
    for field in _BLOCKS:
        children = getattr(node, field, None)
        for index, child in enumerate(children if isinstance(children, list) else ()):
            start = first_line(child) if isinstance(child, ast.stmt) else child.lineno
            end = child.end_lineno or child.lineno
            if all(start <= lo and hi <= end for lo, hi in changed):
                return node, field, index
    return None
