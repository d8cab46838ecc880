"""An edit that special-cases the failing test: it compares an input with a value the test calls the
function with or expects (`if n == 42: return 7`), or returns such a value outright. The test
passes; the function is no more right than it was.

A pure reading of the edit's two texts and the literals of the tests it fixed (`literals_of_test`):
a comparison for equality or membership (`==`, `!=`, `in`, `not in`, `is`, `is not`) of an
expression reading a parameter of a changed function with a literal of the failing
test, or a `return`/`yield` of such a literal, where the module held that literal nowhere before the
edit (a fix that puts back a value the module already uses, `tablefmt == "grid"` in tabulate, is no
special case). Added, not changed: a comparison of what the function compared before, or a literal
returned where the function returned as many literals before, is a value put right (the true fixes
of mutants of tabulate's `_isbool` and pyasn1's `prettyPrint`). An ordering comparison (`n < 2`) is a boundary, which true fixes add all the time; a
trivial literal (`TRIVIAL`) is in every fix. Literals are compared by value and kind: `2` is `2.0`
(Python compares them equal), `1` is never `True`.

`SpecialCaseStage` reports them for a candidate that improved (the `settled` step), as plausibility
reports its findings: rejected with `plausibility = "reject"`, said in the stage's detail with
`"warn"`; not looked for with `"off"` or when the run's `semantic_off` names `special-case`.
"""

from __future__ import annotations

import ast
import functools
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.domain.candidate import FileChange
from ralph.domain.pyast import literal_eval, parse
from ralph.domain.results import Diagnostic, StageResult, findings_result
from ralph.validators.dataflow import Edit, Function, parsed

if TYPE_CHECKING:
    from ralph.validators.stages import Attempt

CODE = "special-case"
# A literal's value with its type, hashable (containers as tuples or frozensets of their items' keys).
Key = tuple[object, ...]


def _key(value: object) -> Key:
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, set | frozenset):
        return (type(value).__name__, frozenset(_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((_key(k), _key(v)) for k, v in value.items()))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return ("number", value)  # (`n == 42.0` compares with the test's 42: 42 == 42.0 in Python)
    return (type(value).__name__, value)


# Values every fix writes (a default, a count's start, an empty result): none is a sign of anything.
_COMMON: tuple[object, ...] = (None, True, False, 0, 1, -1, 0.0, 1.0, "", b"", (), [], {}, set(), frozenset())
TRIVIAL = frozenset(_key(v) for v in _COMMON)
_EQUALITY = (ast.Eq, ast.NotEq, ast.In, ast.NotIn, ast.Is, ast.IsNot)
_MAX_TEXT = 2 << 20  # a file this large is not read (a generated module, a table of data)


def literal_key(node: ast.AST) -> Key | None:
    """The key of a literal expression (a constant, a negative number, a container of literals);
    None for anything else."""
    if not isinstance(node, ast.Constant | ast.UnaryOp | ast.List | ast.Tuple | ast.Set | ast.Dict):
        return None
    try:
        value = literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return None if value is Ellipsis else _key(value)


def literals(nodes: Iterator[ast.AST]) -> frozenset[Key]:
    """The literals among `nodes`, whole containers and their items. The `5` of `-5` and the pieces
    of an f-string are no literals of their own."""
    found: set[Key] = set()
    parts: set[int] = set()
    for node in nodes:
        if id(node) in parts:
            continue
        if isinstance(node, ast.UnaryOp):
            parts.add(id(node.operand))
        elif isinstance(node, ast.JoinedStr):
            parts.update(id(v) for v in node.values)
        key = literal_key(node)
        if key is not None:
            found.add(key)
    return frozenset(found)


@functools.lru_cache(maxsize=8)
def _held(text: str) -> frozenset[Key]:
    """The literals a module's text holds, the trivial ones too (the accepted text of a file is read
    for each candidate that changes it: once)."""
    return literals(ast.walk(parsed(text))) | TRIVIAL


@dataclass(frozen=True)
class SpecialCase:
    """A literal of a failing test that a changed function now compares an input with, or returns."""

    function: str
    line: int  # in the edited text
    literal: str  # as the edit writes it
    subject: str | None  # the expression compared with it; None: the literal is returned
    test: str  # the failing test it is a value of

    def message(self) -> str:
        if self.subject is None:
            return f"{self.function} now returns {self.literal}, a value of the failing test {self.test}"
        return (
            f"{self.function} now compares `{self.subject}` with {self.literal}, "
            f"a value of the failing test {self.test}"
        )


def special_cases(before: str, after: str, tests: Mapping[str, Collection[Key]]) -> list[SpecialCase]:
    """The special cases the edit from `before` to `after` adds to the functions it changed, for
    the failing `tests` (each test's node id and its literals: `literals_of_test`)."""
    edit = Edit.read(before, after)
    if edit is None:
        return []

    def of_a_test(key: Key | None) -> str | None:
        """The failing test `key` is a value of, where the module held no such value before."""
        test = next((t for t, found in tests.items() if key in found), None) if key is not None else None
        return test if test is not None and key not in _held(before) else None  # (it parsed: Edit.read)

    found: list[SpecialCase] = []
    for name, function in edit.changed():
        was = edit.old.get(name)
        inputs = _inputs(function)
        # What the edit changed rather than added: a comparison of a subject the function compared
        # before (`string in ("True", "false")` put right), a literal returned where one was before
        # (pyasn1's `return ''` put back to `return '<overflow>'`).
        compared = _subjects(was) if was is not None else set()
        for node in _own(function):
            if isinstance(node, ast.Compare):
                found += _compared(name, node, inputs, compared, of_a_test)
        returned = _returned(function)
        if len(returned) > len(_returned(was) if was is not None else []):
            for value in returned:
                if (test := of_a_test(literal_key(value))) is not None:
                    found.append(SpecialCase(name, value.lineno, ast.unparse(value), None, test))
    return sorted(found, key=lambda case: case.line)


def _returned(function: Function) -> list[ast.expr]:
    """The literals the function returns or yields as they are (`return 7`), whatever its input:
    in its body's own statements, under no condition. A literal returned in a branch is how a
    missing case is added (`if n % 15 == 0: return "FizzBuzz"`, February's 29); a branch that is a
    special case shows in its condition, which `_compared` reads."""
    found = []
    for statement in _unconditional(function.body):
        node = statement.value if isinstance(statement, ast.Expr) else statement
        if isinstance(node, ast.Return | ast.Yield) and node.value is not None and literal_key(node.value):
            found.append(node.value)
    return found


def _unconditional(block: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of `block` that run whatever the input: its own, and those in the body of a
    `with` or a `try` among them (not a branch's, a loop's or a handler's)."""
    for statement in block:
        if isinstance(statement, ast.With | ast.AsyncWith):
            yield from _unconditional(statement.body)
        elif isinstance(statement, ast.Try):
            yield from _unconditional(statement.body + statement.finalbody)
        else:
            yield statement


def _compared(
    name: str,
    node: ast.Compare,
    inputs: set[str],
    before: set[str],
    of_a_test: Callable[[Key | None], str | None],
) -> Iterator[SpecialCase]:
    """The sides of `node`'s equality and membership tests that read an input, were compared with
    nothing before (`before`: those the function compared), and meet a test's literal."""
    for subject, other in _pairs(node):
        if ast.unparse(subject) in before or not _reads(subject, inputs):
            continue
        items = other.elts if isinstance(other, ast.List | ast.Tuple | ast.Set) else []
        for literal in (other, *items):  # (`n in (3, 5)` compares n with 3 and with 5)
            if (test := of_a_test(literal_key(literal))) is not None:
                yield SpecialCase(name, node.lineno, ast.unparse(literal), ast.unparse(subject), test)
                break


def _pairs(node: ast.Compare) -> Iterator[tuple[ast.expr, ast.expr]]:
    """(what is compared, what with) for each equality or membership test of `node`, both ways."""
    sides = [node.left, *node.comparators]
    for left, op, right in zip(sides, node.ops, node.comparators, strict=False):
        if isinstance(op, _EQUALITY):
            yield from ((s, o) for s, o in ((left, right), (right, left)) if literal_key(s) is None)


def _subjects(function: Function) -> set[str]:
    """The expressions the function compares for equality or membership, as written."""
    return {
        ast.unparse(s) for node in _own(function) if isinstance(node, ast.Compare) for s, _ in _pairs(node)
    }


def _own(function: Function) -> Iterator[ast.AST]:
    """The nodes of the function's body, not those of the functions and classes it defines (each
    changed function is read on its own)."""
    stack: list[ast.AST] = list(reversed(function.body))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _inputs(function: Function) -> set[str]:
    """The function's parameters: a special case compares the input itself (`n == 42`, `len(s) ==
    3`). A name bound from it is left alone: a loop's item compared with a character
    (`for b in brackets: if b == "<"`) is how a parser reads its input, and HumanEvalFix's true
    fix of `correct_bracketing` is one."""
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {a.arg for a in every if a is not None}


def _reads(node: ast.expr, inputs: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in inputs for n in ast.walk(node))


# The failing tests' literals.


@functools.lru_cache(maxsize=256)
def literals_of_test(source: str, nodeid: str) -> frozenset[Key]:
    """The literals of the test `nodeid` names in its module's text `source`: those of its function
    and decorators (pytest's parametrize), of the module's functions it calls by name or takes as a
    fixture (HumanEvalFix's `def test_f(): check(f)` asserts in `check`), and of the module-level
    names it reads (a table of cases). Empty when the module does not parse or has no such function."""
    module = _module(source)
    found = _test_function(module, nodeid) if module is not None else None
    if module is None or found is None:
        return frozenset()
    test, around = found
    helpers = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    tables = {
        t.id: n.value
        for n in module.body
        if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    }
    read = [test, *around]
    names = {n.id for node in read for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {a.arg for a in test.args.args}  # (a fixture of the module, by its parameter's name)
    read += [helpers[n] for n in names if n in helpers and helpers[n] is not test]
    read += [tables[n] for n in names if n in tables]
    return literals(node for part in read for node in ast.walk(part))


def _test_function(module: ast.Module, nodeid: str) -> tuple[Function, list[ast.expr]] | None:
    """The function `nodeid` names (`path::Class::test[params]`), and the decorators of the classes
    it lies in (they parametrize it too)."""
    *classes, name = [part.split("[")[0] for part in nodeid.split("::")[1:]] or [""]
    scope: list[ast.stmt] = module.body
    around: list[ast.expr] = []
    for part in classes:
        found = next((n for n in scope if isinstance(n, ast.ClassDef) and n.name == part), None)
        if found is None:
            return None
        around += found.decorator_list
        scope = found.body
    function = next((n for n in scope if isinstance(n, Function) and n.name == name), None)
    return (function, around) if function is not None else None


@functools.lru_cache(maxsize=32)
def _module(source: str) -> ast.Module | None:
    try:
        return parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None


# The stage.


def fixed_tests(attempt: Attempt) -> list[str]:
    """The tests failing in the accepted state that pass with the candidate: what it was made for."""
    merged = attempt.merged.tests
    return [t for t in attempt.current.failing_tests() if t in merged and merged[t].outcome == "passed"]


@dataclass
class SpecialCaseStage:
    """A candidate that special-cases the tests it fixes (see above): in the `settled` step, for a
    candidate that improved, on the texts of its changes and of the tests' modules (tests are kept
    from edits, so what the workspace holds is what failed)."""

    name: str = CODE

    def wanted(self, attempt: Attempt) -> bool:
        settings = attempt.context.settings
        if settings.plausibility == "off" or CODE in settings.semantic_off:
            return False
        return bool(self._changes(attempt)) and bool(fixed_tests(attempt))

    def run(self, attempt: Attempt) -> StageResult:
        start = time.perf_counter()
        project = attempt.context.tools.toolchain.project
        tests = {t: literals_of_test(_read(project / t.split("::")[0]), t) for t in fixed_tests(attempt)}
        changes = self._changes(attempt)
        found = [
            Diagnostic(self.name, c.path, case.line, CODE, case.message())
            for c in changes
            for case in special_cases(c.before or "", c.after or "", tests)
        ]
        warn = attempt.context.settings.plausibility == "warn"
        checked = [(self.name, c.path) for c in changes]
        return findings_result(self.name, found, warn=warn, start=start, checked=checked)

    @staticmethod
    def _changes(attempt: Attempt) -> list[FileChange]:
        """The changed Python modules that are not tests (a test edited is no function special-cased)."""
        tests = attempt.context.facts.test_files
        return [
            c
            for c in attempt.candidate.changes
            if c.path.endswith(".py")
            and c.after is not None
            and c.path not in tests
            and len(c.after) + len(c.before or "") <= _MAX_TEXT
        ]


def _read(path: Path) -> str:
    """A test module's text ("" when it cannot be read: no literals, no finding)."""
    try:
        return path.read_text() if path.stat().st_size <= _MAX_TEXT else ""
    except (OSError, UnicodeDecodeError):
        return ""
