"""Is a plausible fix correct? A HumanEvalFix task's fix judged beyond the tests it was fixed with:
by the task's full test (hidden from the loop when it fixed with `example_test` only), and by its
outputs against the canonical solution's on the inputs the tests call it with and their neighbours
(one argument moved a step: a number by one, a list by an element).

A fix that passes the tests it saw and fails these is plausible but overfit: it learned the tests, not
the function. The fix is candidate code: the judge runs it in the run's sandbox.
"""

from __future__ import annotations

import ast
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph.domain.pyast import literal_eval, parse

# Inputs compared at most per task (the tests' calls first, then their neighbours).
MAX_INPUTS = 120


@dataclass(frozen=True)
class Hidden:
    """What the judge needs of a task: the function's name, its prompt (signature and docstring),
    the full test and, when the task has one, the canonical body."""

    entry: str
    prompt: str
    test: str
    canonical: str | None = None

    @classmethod
    def of(cls, row: dict[str, Any]) -> Hidden:
        """A JSONL row's (TypeError when a field is not text: bad input)."""
        fields = [row["entry_point"], row["prompt"], row["test"], row.get("canonical_solution") or None]
        if not all(isinstance(f, str) for f in fields[:3]) or not isinstance(fields[3], str | None):
            raise TypeError("entry_point, prompt, test and canonical_solution must be text")
        return cls(*fields)


def inputs(test: str, entry: str) -> list[tuple[tuple[Any, ...], bool]]:
    """The literal argument tuples of the test's calls of the function (by its name, or by `check`'s
    parameter), then each one's neighbours (marked True); a call with an argument that is no literal
    is left out."""
    try:
        tree = parse(test)
    except SyntaxError:
        return []
    names = {entry} | {
        node.args.args[0].arg
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "check" and node.args.args
    }
    called: list[tuple[Any, ...]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            try:
                called.append(tuple(literal_eval(a) for a in node.args))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
    found: dict[str, tuple[tuple[Any, ...], bool]] = {}
    for each, near in [(c, False) for c in called] + [(n, True) for c in called for n in neighbours(c)]:
        found.setdefault(repr(each), (each, near))
    return list(found.values())[:MAX_INPUTS]


def neighbours(args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """`args` with one argument moved a step: an int by one either way, a float by a half, a bool
    flipped, a list one element shorter, with its last repeated, or reversed. Never a string: a string argument
    usually has a grammar (balanced parentheses, a date) that a step breaks, and a fix and the
    canonical solution may answer such an input differently, both rightly."""
    near = []
    for i, value in enumerate(args):
        for moved in _steps(value):
            near.append((*args[:i], moved, *args[i + 1 :]))
    return near


def _steps(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value - 1, value + 1]
    if isinstance(value, float):
        return [value - 0.5, value + 0.5]
    if isinstance(value, list) and value:
        return [value[:-1], value + value[-1:], value[::-1]]
    return []


# What a script run in the sandbox starts with: a time limit on a call (`within`, which answers
# ("ok", value), ("timeout", None) or ("raise", the exception's name)), and `same`, the comparison of
# two answers (floats within 1e-6, a bool never equal to an int). The study of rival fixes
# (tests/study_rival_fixes.py) runs on it too.
SANDBOX_HELPERS = r"""
import ast, copy, json, math, signal, sys, time
sys.setrecursionlimit(10000)
class Late(BaseException):
    pass
def late(*_):
    raise Late()
signal.signal(signal.SIGALRM, late)
def within(seconds, call):
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return "ok", call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Late:
        return "timeout", None
    except BaseException as exc:
        return "raise", type(exc).__name__
def same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (a != a and b != b)
        except TypeError:
            return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b) and type(a) is type(b)
    except BaseException:
        return False
"""

# Run inside the sandbox: the fix's module and the canonical one side by side. Writes its verdict to
# verdict.json as it goes (the hidden test's, then the inputs whose outputs differ), so a fix that
# outlives every limit (one that catches BaseException in a loop) still leaves what was judged.
_SCRIPT = (
    SANDBOX_HELPERS
    + r"""
def load(path):
    space = {"__name__": path[:-3]}
    exec(compile(open(path).read(), path, "exec"), space)
    return space
def say(verdict):
    with open("verdict.json", "w") as out:
        json.dump(verdict, out)
entry = sys.argv[1]
verdict = {"hidden": None, "differs": [], "differs_near": [], "compared": 0}
state, fixed = within(10, lambda: load("fixed.py"))
if state != "ok":
    verdict["hidden"] = "the fix does not import: " + str(fixed)
    say(verdict); sys.exit(0)
test = dict(fixed)
state, why = within(HIDDEN_S, lambda: exec(compile(open("hidden_test.py").read(), "hidden_test.py", "exec"), test))
verdict["hidden"] = "pass" if state == "ok" else ("timeout" if state == "timeout" else "fail: " + str(why))
say(verdict)
if len(sys.argv) > 2:
    canonical = load("canonical.py")
    for line in open("inputs.txt").read().splitlines():
        if not line.strip():
            continue
        near, args = line[0] == "N", ast.literal_eval(line[2:])
        want = within(1, lambda: canonical[entry](*copy.deepcopy(args)))
        if want[0] != "ok":
            continue  # outside what the canonical solution handles: no verdict there
        got = within(1, lambda: fixed[entry](*copy.deepcopy(args)))
        verdict["compared"] += 1
        if got[0] != "ok" or not same(got[1], want[1]):
            verdict["differs_near" if near else "differs"].append(line[2:202])
        say(verdict)
verdict["done"] = True
say(verdict)
"""
)


def judge(
    solution: str,
    hidden: Hidden,
    python: str,
    sandbox_name: str,
    limit_s: float = 120.0,
    hidden_s: float = 20.0,
) -> dict[str, Any]:
    """The fix `solution` (the whole module) judged in the sandbox: `hidden` (the full test: "pass",
    "fail: why", "timeout"), `differs` and `differs_near` (the tests' inputs, and their neighbours,
    whose output is not the canonical one's), `compared`, and `correct` (passes the full test and
    differs nowhere), `unfinished` when the judge did not get through (it outlived `limit_s`: not
    correct); the full test gets `hidden_s` (then "timeout"). The judge trusts the fix not to attack
    it (it runs in the judge's process, sandboxed from the machine, not from the verdict): a
    measurement, not a verification."""
    from ralph.domain.errors import RalphError
    from ralph.sandboxes import select_sandbox

    with tempfile.TemporaryDirectory(prefix="ralph-judge-") as tmp:
        folder = Path(tmp)
        (folder / "fixed.py").write_text(solution, encoding="utf-8")
        (folder / "hidden_test.py").write_text(hidden.test, encoding="utf-8")
        argv = [python, "-c", _SCRIPT.replace("HIDDEN_S", repr(float(hidden_s))), hidden.entry]
        if hidden.canonical is not None:
            (folder / "canonical.py").write_text(hidden.prompt + hidden.canonical, encoding="utf-8")
            lines = [f"{'N' if near else 'T'} {args!r}" for args, near in inputs(hidden.test, hidden.entry)]
            (folder / "inputs.txt").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            argv.append("canonical")
        box = select_sandbox(sandbox_name, folder, [folder])
        try:
            run = box.run(argv, cwd=str(box.mount_at or folder), timeout_s=limit_s)
        finally:
            box.close()
        try:
            verdict: dict[str, Any] = json.loads((folder / "verdict.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            if run.returncode == 0 and not run.timed_out:  # (a sandbox that writes nothing back)
                raise RalphError(
                    f"the judge ran, and its verdict did not come back from {sandbox_name}"
                ) from None
            verdict = {"hidden": None, "differs": [], "differs_near": []}
    if verdict.get("hidden") is None:
        verdict["hidden"] = f"no verdict (exit {run.returncode}): {run.output[-200:]}"
    if not verdict.pop("done", False):
        verdict["unfinished"] = "timed out" if run.timed_out else f"exit {run.returncode}"
    verdict["correct"] = (
        verdict["hidden"] == "pass"
        and not verdict["differs"]
        and not verdict["differs_near"]
        and "unfinished" not in verdict
    )
    return verdict
