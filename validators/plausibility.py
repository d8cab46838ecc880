"""Is the edit plausible as a fix? Signs of a wrong fix that weak tests can let through, in the
functions the candidate changed: a parameter or variable left unused (`clamp(value, low, high)` whose
edited body does not use `high`), a parameter the edit cut from the function's result, raises or
effects (`dataflow`), a name compared with itself, branches or conditional arms that are the same. A function the edit touched is expected to come out right, whatever it was before: an edit
that leaves its parameter unused is no fix of it.

ruff finds them (these rules only, whatever the project selects: `--isolated`) in each changed Python
file's new text, given through stdin (nothing of the candidate runs, nothing is written); those inside
a changed function are reported as diagnostics of the `plausibility` tool, which the runner rejects as
it rejects any new diagnostic. With `warn`, they are only said in the stage's detail.
"""

from __future__ import annotations

import ast
import functools
import json
import time
from collections.abc import Callable, Collection, Sequence

from ralph.domain.candidate import FileChange, edited_lines, shared_ends
from ralph.domain.results import Diagnostic, StageResult, elapsed_ms, findings_result
from ralph.sandboxes.local import Started
from ralph.validators.dataflow import Edit, parsed
from ralph.validators.toolchain import Toolchain

RULES = ("ARG001", "ARG002", "F841", "PLR0124", "SIM114", "RUF034")
# Ours (`dataflow.cuts`): a parameter that reached the function's result, a raise or an effect before
# the edit and does not after it (`rescale` returning `new_min + ratio * (new_min - old_min)`).
FLOW_CUT = "flow-cut"
# Ours (`dataflow.swallowed`): an exception handler the edit added that does nothing or returns a constant.
SWALLOWED = "swallowed"
# A finding already in the accepted text, on a line the edit left as it was, is the project's own when
# it is of the code's shape (pyflakes has `if`/`elif` branches that are the same on purpose), a
# method's unused parameter (an interface: pyasn1's `decodeFun`, `state`), or a function's unused
# parameter whose name other functions of the module take too (a family of callbacks: tabulate's
# `colwidths`), or a variable it already left unused (boltons' `get_path` binds `except TypeError as
# exc` and never reads that binding: its true fix was rejected for it), or a `*args`/`**kw` it
# already left unused (pyasn1's `plug(self, *args, **kw)` absorbs any call and raises). A parameter
# that another function of the module leaves unused too is an interface's, new or not (a fix of
# pyasn1 that stops using `decodeFun` again, as its siblings do). Measured: 12
# of 60 true fixes of pyflakes, tabulate and pyasn1 were rejected for them. A function's parameter
# no other takes stays a finding, unused before or not: the bug that made `clamp`'s `high` unused is
# not fixed by an edit that leaves it so.
_STRUCTURAL = frozenset({"PLR0124", "SIM114", "RUF034"})
MODES = ("reject", "warn", "off")
_MAX_TEXT = 2 << 20  # a file this large is not checked (a generated module)


def _explain(code: str, message: str) -> str:
    """ruff's message as a reason a reader of a rejected fix understands."""
    name = message.split("`")[1] if message.count("`") >= 2 else ""
    if code in ("ARG001", "ARG002") and name:
        return f"parameter `{name}` becomes unused"
    if code == "F841" and name:
        return f"variable `{name}` becomes unused"
    if code == "PLR0124":
        return f"a name is compared with itself ({message})"
    if code == "SIM114":
        return "two branches became the same"
    if code == "RUF034":
        return "both arms of a conditional expression became the same"
    return message


class PlausibilityValidator:
    name = "plausibility"

    def __init__(
        self, toolchain: Toolchain, binary: str, mode: str = "reject", off: Collection[str] = ()
    ) -> None:
        self.toolchain = toolchain
        self.binary = binary
        self.mode = mode
        self.off = frozenset(off)  # the rules (codes) the project turned off
        self.rules = tuple(r for r in RULES if r not in self.off)
        # What ruff is asked for: the rules on, and both ARG rules whenever one is (the excuse of an
        # interface's parameter counts the functions of either kind that ignore it); what a turned
        # off rule finds is dropped after the counting.
        self.select = self.rules + tuple(
            r for r in ("ARG001", "ARG002") if r not in self.rules and self.rules
        )
        # The findings of each file's accepted text (path, text) as (code, message, row).
        self._before: dict[tuple[str, str], frozenset[tuple[str, str, int]]] = {}

    def start(self, changes: Sequence[FileChange], timeout_s: float = 30.0) -> Callable[[], StageResult]:
        """Start ruff on each changed file's new text; calling the result waits for the verdict."""
        start = time.perf_counter()
        files = [
            c for c in changes if c.path.endswith(".py") and c.after is not None and len(c.after) <= _MAX_TEXT
        ]
        if self.mode == "off" or not files or (not self.rules and {FLOW_CUT, SWALLOWED} <= self.off):
            return lambda: StageResult(
                self.name, ok=True, duration_ms=0.0, skipped=True, detail="nothing to check"
            )
        ruff = bool(self.rules)  # (every ruff rule turned off: only ours)
        running: list[tuple[FileChange, Started | None]] = [
            (c, self._start(c.path, c.after or "") if ruff else None) for c in files
        ]
        earlier = {
            (c.path, c.before): self._start(c.path, c.before)
            for c in files
            if ruff and c.before is not None and (c.path, c.before) not in self._before
        }

        def collect() -> StageResult:
            found: list[Diagnostic] = []
            for key, process in earlier.items():  # (only the latest accepted text of a file is kept)
                self._before = {k: v for k, v in self._before.items() if k[0] != key[0]}
                self._before[key] = self._findings(key[1], process, timeout_s)
            for change, answer in running:
                try:
                    after = self._read(answer.wait(timeout_s).output) if answer is not None else []
                except ValueError as exc:  # ruff did not answer: no verdict, never a silent pass
                    why = f"ruff gave no findings for {change.path}: {exc}"
                    return StageResult(
                        self.name, ok=False, duration_ms=elapsed_ms(start), detail=why, error=why
                    )
                spans = changed_functions(change.before or "", change.after or "")
                before = change.before or ""
                own = _Own(self._before.get((change.path, before), frozenset()), before, change.after or "")
                own.ignored = _ignored_parameters(after)
                found += [
                    Diagnostic(self.name, change.path, line, code, _explain(code, message))
                    for code, message, line in after
                    if code not in self.off
                    and any(first <= line <= last for first, last in spans)
                    and not own.excuses(code, message, line)
                ]
                found += self._ours(change.path, before, change.after or "")
            checked = [(self.name, c.path) for c in files]
            return findings_result(self.name, found, warn=self.mode == "warn", start=start, checked=checked)

        return collect

    def _ours(self, path: str, before: str, after: str) -> list[Diagnostic]:
        """What ralph's own readings of the two texts find (`dataflow`, one parse of each)."""
        edit = Edit.read(before, after)
        if edit is None:
            return []
        found = []
        if FLOW_CUT not in self.off:
            found += [Diagnostic(self.name, path, c.line, FLOW_CUT, c.message()) for c in edit.cuts()]
        if SWALLOWED not in self.off:
            found += [Diagnostic(self.name, path, q.line, SWALLOWED, q.message()) for q in edit.swallowed()]
        return found

    def _start(self, path: str, text: str) -> Started:
        argv = [self.binary, "check", "--isolated", "--no-cache", f"--select={','.join(self.select)}"]
        # `--stdin-filename=PATH` as one argument: a file named like an option stays a file name.
        argv += ["--output-format=json", "--exit-zero", f"--stdin-filename={path}", "-"]
        return self.toolchain.tools.start(
            argv, cwd=str(self.toolchain.project), env={"RAYON_NUM_THREADS": "1"}, stdin=text
        )

    def _findings(self, text: str, process: Started, timeout_s: float) -> frozenset[tuple[str, str, int]]:
        """The findings of an accepted text (none when ruff gave no answer: nothing is excused then)."""
        try:
            return frozenset(self._read(process.wait(timeout_s).output))
        except ValueError:
            return frozenset()

    @staticmethod
    def _read(output: str) -> list[tuple[str, str, int]]:
        records = json.loads(output)  # (ValueError when it is not ruff's JSON)
        if not isinstance(records, list):
            raise ValueError("not a list of findings")
        found = []
        for record in records:
            try:
                found.append((str(record["code"]), str(record["message"]), int(record["location"]["row"])))
            except (KeyError, TypeError, ValueError):
                continue
        return found


def _ignored_parameters(findings: list[tuple[str, str, int]]) -> dict[str, int]:
    """How many functions leave each parameter name unused (ruff's ARG findings of the whole text)."""
    counts: dict[str, int] = {}
    for code, message, _ in findings:
        if code in ("ARG001", "ARG002") and message.count("`") >= 2:
            name = message.split("`")[1]
            counts[name] = counts.get(name, 0) + 1
    return counts


class _Own:
    """Which findings of a candidate's text are the project's own (see the rules above): the same
    finding on the same line of the accepted text, a line before or after everything the edit changed."""

    def __init__(self, before: frozenset[tuple[str, str, int]], old: str, after: str) -> None:
        self.before = before
        self._after = after
        old_lines, new_lines = old.splitlines(), after.splitlines()
        self.head, tail = shared_ends(old_lines, new_lines)
        self.tail_from = len(new_lines) - tail  # rows after this one lie after the edit
        self.shift = len(new_lines) - len(old_lines)
        self.ignored: dict[str, int] = {}  # how many functions of the new text leave each name unused

    def _old_row(self, row: int) -> int | None:
        if row <= self.head:
            return row
        return row - self.shift if row > self.tail_from else None

    def excuses(self, code: str, message: str, row: int) -> bool:
        name = message.split("`")[1] if message.count("`") >= 2 else ""
        if code in ("ARG001", "ARG002") and self.ignored.get(name, 0) > 1:
            return True  # another function of the module ignores it too: an interface's parameter
        old = self._old_row(row)
        if old is None or (code, message, old) not in self.before:
            return False  # the edit's own
        if code in _STRUCTURAL or code == "ARG002" or code == "F841":
            return True  # (a variable already unused there did not become unused)
        return code == "ARG001" and (name in self.shared or (name, row) in self.variadic)

    @property
    def variadic(self) -> set[tuple[str, int]]:
        """The `*args` and `**kw` parameters of the module's functions (name, line): one that
        absorbs whatever it is called with is often unused by design (pyasn1's `plug(self, *args,
        **kw)`, which raises)."""
        return self._parameters[1]

    @property
    def shared(self) -> set[str]:
        """Parameter names that two or more functions of the module take."""
        return self._parameters[0]

    @functools.cached_property
    def _parameters(self) -> tuple[set[str], set[tuple[str, int]]]:
        """(`shared`, `variadic`), from one parse of the new text."""
        counts: dict[str, int] = {}
        variadic: set[tuple[str, int]] = set()
        try:
            tree = parsed(self._after)
        except (SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                for arg in {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}:
                    counts[arg] = counts.get(arg, 0) + 1
                variadic |= {(a.arg, a.lineno) for a in (args.vararg, args.kwarg) if a is not None}
        return {name for name, n in counts.items() if n > 1}, variadic


def changed_functions(before: str, after: str) -> list[tuple[int, int]]:
    """The line spans (first, last) of the functions of `after` whose lines the edit changed."""
    try:
        tree = parsed(after)
    except (SyntaxError, ValueError):
        return []
    low, high = edited_lines(before, after)
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first <= high and low <= node.end_lineno:
                spans.append((first, node.end_lineno))
    return spans
