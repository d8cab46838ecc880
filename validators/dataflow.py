"""Which parameters of a function reach what it does: its result (a returned or yielded value), a
raised exception, or an effect (an attribute or item it sets, a call made for its effect), and which
of those an edit cut.

A sign of a plausible but wrong fix (the tests pass, the function is wrong): `rescale(value, old_min,
old_max, new_min, new_max)` returning `new_min + ratio * (new_min - old_min)` passes every test a
weak suite has, and `new_max` no longer reaches the result, though it did before the edit (it is
still read, on the line that validates it, so no "unused parameter" rule sees it). A pure reading of
two texts: a name holds a parameter's value when it is assigned from an expression that reads one
that does (whatever the order of the statements, loops included); a result, a raise or an effect
reaches the parameters its expression reads, and those of the conditions it lies under.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass

from ralph.domain.candidate import edited_lines
from ralph.domain.pyast import parse

Function = ast.FunctionDef | ast.AsyncFunctionDef
KINDS = ("result", "raise", "effect")


# Texts up to this size have their trees kept (a tree takes tens of times its text's memory).
_KEPT_TEXT = 512 << 10


def parsed(text: str) -> ast.Module:
    """The tree of a module's text, shared: the semantic stages read a candidate's two texts (the
    accepted one, the same for every candidate of a state, and the edited one) each once, not once
    per stage (tabulate's 3,000 lines: ~20 ms a parse). Read only: no caller may change it."""
    return _parsed(text) if len(text) <= _KEPT_TEXT else parse(text)


@functools.lru_cache(maxsize=4)
def _parsed(text: str) -> ast.Module:
    return parse(text)


@dataclass(frozen=True)
class Cut:
    """A parameter that reached `kind` in the function before the edit and does not after it."""

    function: str  # its qualified name
    parameter: str
    kind: str  # one of KINDS
    line: int  # the function's first line in the edited text

    def message(self) -> str:
        what = {"result": "its result", "raise": "the exception it raises", "effect": "what it changes"}
        return f"parameter `{self.parameter}` of {self.function} no longer reaches {what[self.kind]}"


@dataclass(frozen=True)
class Swallowed:
    """An exception handler the edit added that catches any failure, or an assertion's, and hides
    it: it does nothing, or gives back a constant (`except Exception: pass`, `except: return None`,
    `except AssertionError: return 0`)."""

    function: str
    line: int  # the handler's line in the edited text
    caught: str  # what it catches, as written

    def message(self) -> str:
        return f"{self.function} now swallows {self.caught} (its handler does nothing or returns a constant)"


@dataclass(frozen=True)
class Edit:
    """One edit of a module, both texts parsed once: the functions it changed, and what the readings
    (`cuts`, `swallowed`) find in them."""

    old: dict[str, Function]
    new: dict[str, Function]
    lines: tuple[int, int]  # the lines of the new text it touched (`edited_lines`)

    @classmethod
    def read(cls, before: str, after: str) -> Edit | None:
        """The edit from `before` to `after`; None where either text does not parse. Its trees are
        shared (`parsed`): read only."""
        try:
            old, new = _functions(parsed(before)), _functions(parsed(after))
        except (SyntaxError, ValueError, RecursionError):
            return None
        return cls(old, new, edited_lines(before, after))

    def changed(self) -> Iterator[tuple[str, Function]]:
        """The functions of the new text the edit changed: over the lines it touched, not the same tree."""
        low, high = self.lines
        for name, node in self.new.items():
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first > high or (node.end_lineno or first) < low:
                continue
            was = self.old.get(name)
            if was is None or ast.dump(was) != ast.dump(node):
                yield name, node

    def cuts(self) -> list[Cut]:
        """The parameters the edit cut from a changed function's result, raises or effects."""
        found = []
        for name, node in self.changed():
            was = self.old.get(name)
            if was is None:
                continue
            kept = set(_parameters(node))
            reached, reaches = flows(was), flows(node)
            for kind in KINDS:
                if kind not in reaches:  # (none is left: removing a return a mutant added cuts nothing)
                    continue
                for parameter in sorted((reached.get(kind, set()) - reaches[kind]) & kept):
                    if not _an_interfaces(parameter, kind, name, self.new):
                        found.append(Cut(name, parameter, kind, node.lineno))
        return found

    def swallowed(self) -> list[Swallowed]:
        """The handlers hiding a failure the edit added to the functions it changed (one such
        handler already there, of the same catch, is the project's own)."""
        found = []
        for name, node in self.changed():
            was = self.old.get(name)
            had = [_caught(h) for h in _quiet_handlers(was)] if was is not None else []
            for handler in _quiet_handlers(node):
                if _caught(handler) in had:
                    had.remove(_caught(handler))
                    continue
                found.append(Swallowed(name, handler.lineno, _caught(handler)))
        return found


def cuts(before: str, after: str) -> list[Cut]:
    """`Edit.cuts` of the edit from `before` to `after` (none where either text does not parse)."""
    edit = Edit.read(before, after)
    return edit.cuts() if edit is not None else []


def swallowed(before: str, after: str) -> list[Swallowed]:
    """`Edit.swallowed` of the edit from `before` to `after`."""
    edit = Edit.read(before, after)
    return edit.swallowed() if edit is not None else []


# What catches any failure (a named exception returning a default is often the fix itself:
# `except IndexError: return None` for an empty list), or the failing assertion's own (no fix of the
# code under test catches an AssertionError: it hides the test's verdict, or the code's own check).
_BROAD = frozenset(
    {
        "Exception",
        "BaseException",
        "AssertionError",
        *(f"builtins.{name}" for name in ("Exception", "BaseException", "AssertionError")),
    }
)


def _quiet_handlers(function: Function) -> Iterator[ast.ExceptHandler]:
    """The handlers that catch any failure (or an assertion's) and hide it."""
    for node, _ in _walk(function.body, ()):
        for handler in getattr(node, "handlers", []) or []:
            caught = handler.type
            names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
            broad = caught is None or any(n is not None and ast.unparse(n) in _BROAD for n in names)
            if broad and all(_quiet(s) for s in handler.body):
                yield handler


def _quiet(statement: ast.stmt) -> bool:
    """A statement that neither raises nor gives back anything computed: pass, `...`, continue, break,
    a return of nothing or of a constant."""
    if isinstance(statement, ast.Pass | ast.Continue | ast.Break):
        return True
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Constant)
    if isinstance(statement, ast.Return):
        return statement.value is None or isinstance(statement.value, ast.Constant)
    return False


def _caught(handler: ast.ExceptHandler) -> str:
    return "every exception" if handler.type is None else ast.unparse(handler.type)


def _an_interfaces(parameter: str, kind: str, name: str, functions: dict[str, Function]) -> bool:
    """Whether another function of the module takes `parameter` and it reaches no `kind` there
    either: a family of callbacks or methods of one interface, some of which ignore it by design
    (pyasn1's `decodeFun`), as the unused-parameter rules excuse it."""
    return any(
        other != name and parameter in _parameters(node) and parameter not in flows(node).get(kind, ())
        for other, node in functions.items()
    )


def flows(function: Function) -> dict[str, set[str]]:
    """For each kind of outcome the function has, the parameters whose values reach it."""
    parameters = set(_parameters(function))
    holds = {p: {p} for p in parameters}  # name -> the parameters its value may carry
    sinks: dict[str, list[tuple[ast.AST, tuple[ast.expr, ...]]]] = {kind: [] for kind in KINDS}
    assignments: list[tuple[list[ast.expr], ast.AST, tuple[ast.expr, ...]]] = []
    for node, conditions in _walk(function.body, ()):
        _collect(node, conditions, sinks, assignments)
    changed = True
    while changed:  # (to a fixed point: a loop may carry a value back to an earlier statement)
        changed = False
        for targets, value, conditions in assignments:
            carried = _carried(value, holds) | set().union(*(_carried(c, holds) for c in conditions))
            for name in _bound(targets):
                if not carried <= holds.setdefault(name, set()):
                    holds[name] |= carried
                    changed = True
    reached: dict[str, set[str]] = {}
    for kind, found in sinks.items():
        if not found:
            continue
        reached[kind] = set()
        for expression, conditions in found:
            reached[kind] |= _carried(expression, holds)
            for condition in conditions:
                reached[kind] |= _carried(condition, holds)
        reached[kind] &= parameters
    return reached


def _functions(tree: ast.Module) -> dict[str, Function]:
    """The module's functions and methods (nested ones too) by qualified name."""
    found: dict[str, Function] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{node.name}"
                found.setdefault(name, node)
                visit(node.body, f"{name}.<locals>.")
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")
            else:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.stmt):
                        visit([child], prefix)

    visit(tree.body, "")
    return found


def _parameters(function: Function) -> Iterator[str]:
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    for arg in every:
        if arg is not None and arg.arg not in ("self", "cls") and not arg.arg.startswith("_"):
            yield arg.arg


def _walk(
    body: list[ast.stmt], conditions: tuple[ast.expr, ...]
) -> Iterator[tuple[ast.stmt, tuple[ast.expr, ...]]]:
    """Each statement of the body (not of nested functions or classes) with the conditions it lies
    under (an `if`'s or `while`'s test, a `for`'s iterable, a `match`'s subject)."""
    for node in body:
        yield node, conditions
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        inner = conditions
        if isinstance(node, ast.If | ast.While):
            inner = (*conditions, node.test)
        elif isinstance(node, ast.For | ast.AsyncFor):
            inner = (*conditions, node.iter)
        elif isinstance(node, ast.Match):
            inner = (*conditions, node.subject)
        for field in ("body", "orelse", "finalbody"):
            yield from _walk(getattr(node, field, []) or [], inner)
        for handler in getattr(node, "handlers", []) or []:
            yield from _walk(handler.body, inner)
        for case in getattr(node, "cases", []) or []:
            yield from _walk(case.body, inner)


def _collect(
    node: ast.stmt,
    conditions: tuple[ast.expr, ...],
    sinks: dict[str, list[tuple[ast.AST, tuple[ast.expr, ...]]]],
    assignments: list[tuple[list[ast.expr], ast.AST, tuple[ast.expr, ...]]],
) -> None:
    """What one statement assigns, and the results, raises and effects it holds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        assignments.append(([ast.Name(node.name)], node, conditions))  # (a closure carries what it reads)
        return
    if isinstance(node, ast.Return) and node.value is not None:
        sinks["result"].append((node.value, conditions))
    elif isinstance(node, ast.Raise) and node.exc is not None:
        sinks["raise"].append((node.exc, conditions))
    elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
        targets: list[ast.expr] = list(node.targets) if isinstance(node, ast.Assign) else [node.target]
        assignments.append((targets, node.value, conditions))
        if isinstance(node, ast.AugAssign):
            assignments.append((targets, node.target, conditions))
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript):
                sinks["effect"].append((node.value, conditions))
    elif isinstance(node, ast.For | ast.AsyncFor):
        assignments.append(([node.target], node.iter, conditions))
    elif isinstance(node, ast.With | ast.AsyncWith):
        for item in node.items:
            if item.optional_vars is not None:
                assignments.append(([item.optional_vars], item.context_expr, conditions))
    elif isinstance(node, ast.Expr):
        if isinstance(node.value, ast.Yield | ast.YieldFrom | ast.Await) and node.value.value is not None:
            sinks["result"].append((node.value.value, conditions))
        elif isinstance(node.value, ast.Call):
            sinks["effect"].append((node.value, conditions))
            receiver = node.value.func
            if isinstance(receiver, ast.Attribute):  # (`items.append(x)`: `items` holds `x` now)
                assignments.append(([_base(receiver)], node.value, conditions))
    if hasattr(node, "body"):  # (a compound statement's own statements come one by one)
        return
    for child in ast.walk(node):  # (walrus and yields inside expressions)
        if isinstance(child, ast.NamedExpr):
            assignments.append(([child.target], child.value, conditions))
        elif isinstance(child, ast.Yield | ast.YieldFrom) and child.value is not None:
            sinks["result"].append((child.value, conditions))


def _base(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _bound(targets: list[ast.expr]) -> Iterator[str]:
    """The local names assigned (an attribute or item set on a name: that name holds more now)."""
    for target in targets:
        for node in ast.walk(_base(target) if isinstance(target, ast.Attribute | ast.Subscript) else target):
            if isinstance(node, ast.Name):
                yield node.id


def _carried(node: ast.AST, holds: dict[str, set[str]]) -> set[str]:
    """The parameters whose values the names `node` reads may carry."""
    found: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and child.id in holds:
            found |= holds[child.id]
    return found
