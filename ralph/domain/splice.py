"""A module's bytecode after an edit of one function's body, from the bytecode before it: the changed
function compiled alone and put in place of its old code (pure functions of the standard library).

Compiling a 3,000-line module takes 12-25 ms; a candidate usually changes the body of one function
or method. That body compiles to a code object of its own, kept in its class's or module's
constants; the code around it does not depend on what the body says (its name, its decorators,
defaults and annotations are the header's, which the edit left alone). So the function is compiled
in a text that holds only it (at its own lines, inside stand-ins of its enclosing classes, which give
it the same qualified name, private-name mangling and `__class__` cell) and its code object replaces
the old one. Anything else falls back to compiling the whole text: a change of the number of lines,
outside one function's body or in its header, a nested class or function chain that is not classes
only, type parameters, a declared source encoding, a stand-in that does not come out as exactly that
function, or a stand-in whose enclosing code differs between the old body and the new one (a
changed `__class__` cell, 3.13's `__static_attributes__`). What the old body gives alone, checked
once against the module's own code, is kept with the module (`accepted`, all of them ahead:
`prepare`), so a candidate compiles only its new body. tests/test_splice.py compares the result
with a whole compile on mutants of real modules.
"""

from __future__ import annotations
import __future__

import ast
import functools
import re
import sys
from dataclasses import dataclass, field
from types import CodeType

from ralph.domain import pyast
from ralph.domain.candidate import shared_ends

# The compiler flags the `__future__` imports set (they change how a body compiles).
FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag

_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=]")
# Every `global` statement's keyword matches (and a word in a comment or a string may).
_GLOBAL = re.compile(rb"\bglobal\b")


@dataclass(frozen=True)
class Body:
    """A function whose body can be compiled alone: its first line (its first decorator's), the
    first line that is its body's alone, its last line, and its enclosing classes (outermost first:
    name, first line, column)."""

    start: int
    body: int
    end: int
    name: str
    is_async: bool
    classes: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class Compiled:
    """A source text, its code (`compile(source, filename, "exec")`), and the functions of it whose
    body can be compiled alone, by first line."""

    source: bytes
    filename: str
    code: CodeType
    bodies: tuple[Body, ...]
    imported: tuple[str, ...] = ()  # the names an import binds at module level
    # Each body compiled alone as it stands, checked against `code` once (`accepted`), by first line.
    alone: dict[int, Alone | None] = field(default_factory=dict, compare=False, repr=False)

    @functools.cached_property
    def lines(self) -> list[bytes]:
        """`source`'s lines, ends kept: split once, not for each candidate that edits it."""
        return self.source.splitlines(keepends=True)


@dataclass(frozen=True)
class Alone:
    """What a body of the accepted text compiled alone gives, where that is exactly the module's own
    code for it: its stand-ins' code without their code constants (`around`, outermost first), the
    function's name, qualified name, first line and free variables (`key`), and the indices of the
    constants that lead from the module's code down to the function's (`places`)."""

    around: tuple[tuple[CodeType, str], ...]
    key: tuple[object, ...]
    places: tuple[int, ...]


def compiled(source: bytes, filename: str) -> Compiled:
    """Compile `source` as the import system does (SyntaxError, ValueError... as `compile` raises)."""
    code = compile(source, filename, "exec", dont_inherit=True, optimize=0)
    # (a declaration on line 2 after a bare `\r` counts too: the tokenizer reads it as a line break)
    if source.startswith(b"\xef\xbb\xbf") or any(_CODING.match(x) for x in source.splitlines()[:2]):
        return Compiled(source, filename, code, ())
    tree = pyast.parse(source, filename)
    # A generic class or function anywhere: 3.12 releases before CPython gh-119395 mangle the names
    # of the code after a generic class with its name, which no stand-in text holds.
    if sys.version_info >= (3, 12) and _generic(tree.body):
        return Compiled(source, filename, code, ())
    return Compiled(source, filename, code, tuple(_bodies(tree.body, ())), _imported(tree.body))


def _imported(statements: list[ast.stmt]) -> tuple[str, ...]:
    """The names an import binds in the module's scope (the compiler calls a method of one of those
    with other instructions: CPython's `is_import_originated`)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(statements)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update(a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            todo.extend(
                n
                for n in ast.iter_child_nodes(node)
                if isinstance(n, ast.stmt | ast.excepthandler | ast.match_case)
            )
    return tuple(sorted(names))


def _generic(statements: list[ast.stmt]) -> bool:
    """Whether a statement anywhere declares type parameters (`class C[T]`, `def f[T]`, `type A[T]`)."""
    todo: list[ast.AST] = list(statements)
    while todo:
        node = todo.pop()
        if getattr(node, "type_params", None):
            return True
        todo.extend(
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, ast.stmt | ast.excepthandler | ast.match_case)
        )
    return False


def _declares_global(function: ast.stmt) -> bool:
    """Whether a `global` statement is anywhere in `function` (statements hold it, never expressions)."""
    todo: list[ast.AST] = [function]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Global):
            return True
        todo.extend(
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, ast.stmt | ast.excepthandler | ast.match_case)
        )
    return False


def _bodies(statements: list[ast.stmt], classes: tuple[tuple[str, int, int], ...]) -> list[Body]:
    found: list[Body] = []
    for node in statements:
        if isinstance(node, ast.ClassDef):
            start = min([node.lineno] + [n.lineno for n in node.decorator_list])
            found += _bodies(node.body, (*classes, (node.name, start, node.col_offset)))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            header = max(
                [node.lineno]
                + [n.end_lineno or 0 for n in node.decorator_list]
                + [n.end_lineno or 0 for n in ast.walk(node.args) if isinstance(n, ast.expr)]
                + [node.returns.end_lineno or 0 if node.returns else 0]
            )
            body = node.body[0].lineno
            start = min([node.lineno] + [n.lineno for n in node.decorator_list])
            if body > header:
                found.append(
                    Body(
                        start,
                        body,
                        node.end_lineno or body,
                        node.name,
                        isinstance(node, ast.AsyncFunctionDef),
                        classes,
                    )
                )
    return found


def spliced(base: Compiled, source: bytes) -> CodeType | None:
    """`compile(source, base.filename, "exec")`, built from `base` where the edit from `base.source`
    changed one function's body and kept the number of lines; None where it cannot be (compile the
    whole text then: that also says what its syntax error is)."""
    if source == base.source:
        return base.code
    old, new = base.lines, source.splitlines(keepends=True)
    if len(old) != len(new) or not base.bodies:
        return None
    head, tail = shared_ends(old, new)  # (the lines changed: from head + 1 to len - tail)
    target = next((b for b in base.bodies if b.body <= head + 1 and len(new) - tail <= b.end), None)
    if target is None or (was := accepted(base, target, old)) is None:
        return None
    fresh = _alone(target, new, base)
    if fresh is None or _around(fresh) != was.around or _key(fresh[-1]) != was.key:
        return None
    return _replaced(base.code, was.places, fresh[-1])


def prepare(base: Compiled) -> None:
    """Compile every body of `base` alone ahead (`accepted`), so a candidate compiles only its own."""
    old = base.lines
    for body in base.bodies:
        accepted(base, body, old)


def accepted(base: Compiled, target: Body, lines: list[bytes] | None = None) -> Alone | None:
    """The body at `target` of the accepted text compiled alone (kept in `base`), or None where that
    is not exactly the module's own code for it (such a body is always compiled whole)."""
    if target.start in base.alone:
        return base.alone[target.start]
    found = None
    chain = _alone(target, lines or base.lines, base)
    if chain is not None and (places := _places(base.code, target, chain[-1])) is not None:
        found = Alone(_around(chain), _key(chain[-1]), places)
    base.alone[target.start] = found
    return found


def _alone(target: Body, lines: list[bytes], base: Compiled) -> list[CodeType] | None:
    """The function of `lines` at `target`, compiled in a text of only it, stand-ins of its classes
    and an import of the names the module imports: the code objects from that text's module down to
    the function's; None where the text is not exactly that function (its body took another shape)
    or does not compile."""
    depth, filename = len(target.classes), base.filename
    flags = base.code.co_flags & FUTURE_FLAGS
    room = target.start - 1 - depth
    if base.imported and room < 1:
        return None
    text = b"\n" * room
    if base.imported:
        text = b"import " + ", ".join(base.imported).encode() + text
    text += b"".join(b" " * column + b"class " + name.encode() + b":\n" for name, _, column in target.classes)
    function = b"".join(lines[target.start - 1 : target.end])
    text += function
    try:
        tree = pyast.parse(text, filename)
        inner: list[ast.stmt] = tree.body[1:] if base.imported else tree.body
        for name, _, _ in target.classes:
            if len(inner) != 1 or not isinstance(inner[0], ast.ClassDef) or inner[0].name != name:
                return None
            inner = inner[0].body
        kind = ast.AsyncFunctionDef if target.is_async else ast.FunctionDef
        if len(inner) != 1 or type(inner[0]) is not kind or inner[0].name != target.name:
            return None
        # A `global` in the body changes how the module's own code stores and loads that name.
        if _GLOBAL.search(function) and _declares_global(inner[0]):
            return None
        # (the tree just read, compiled: as compiling the text, without reading it again)
        code = pyast.locked(
            lambda: compile(tree, filename, "exec", flags=flags, dont_inherit=True, optimize=0)
        )
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    chain = [code]
    for _ in range(depth + 1):
        inner_codes = [c for c in chain[-1].co_consts if isinstance(c, CodeType)]
        if len(inner_codes) != 1:
            return None
        chain.append(inner_codes[0])
    return chain


def _around(chain: list[CodeType]) -> tuple[tuple[CodeType, str], ...]:
    """The stand-ins' code of a chain, their code constants blanked, and their qualified names: the
    same for the old body as for the new one means so is the real module's and classes'."""
    return tuple((c.replace(co_consts=_others(c)), c.co_qualname) for c in chain[:-1])


def _key(function: CodeType) -> tuple[object, ...]:
    """What of the function's code its enclosing code depends on: an edit must keep it."""
    return (function.co_name, function.co_qualname, function.co_firstlineno, function.co_freevars)


def _others(code: CodeType) -> tuple[object, ...]:
    return tuple(None if isinstance(c, CodeType) else c for c in code.co_consts)


def _places(module: CodeType, target: Body, was: CodeType) -> tuple[int, ...] | None:
    """Where the function code `was` sits (found through `target`'s classes): the constants' indices
    from `module` down; None where it is not found there exactly once, or is not what its body
    compiles to alone."""
    path, places = [module], []
    wanted = [(name, line) for name, line, _ in target.classes] + [(was.co_name, was.co_firstlineno)]
    for name, line in wanted:
        hits = [
            i
            for i, c in enumerate(path[-1].co_consts)
            if isinstance(c, CodeType) and (c.co_name, c.co_firstlineno) == (name, line)
        ]
        if len(hits) != 1:
            return None
        places.append(hits[0])
        path.append(path[-1].co_consts[hits[0]])
    if path[-1] != was or path[-1].co_qualname != was.co_qualname:
        return None
    return tuple(places)


def _replaced(module: CodeType, places: tuple[int, ...], fresh: CodeType) -> CodeType:
    """`module` with the code at `places` replaced by `fresh`."""
    path = [module]
    for index in places[:-1]:
        inner = path[-1].co_consts[index]
        assert isinstance(inner, CodeType)
        path.append(inner)
    replacement = fresh
    for parent, index in zip(reversed(path), reversed(places), strict=True):
        consts = list(parent.co_consts)
        consts[index] = replacement
        replacement = parent.replace(co_consts=tuple(consts))
    return replacement
