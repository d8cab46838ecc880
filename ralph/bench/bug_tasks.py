"""The fixed task set of `ralph bench drafter --drafter SPEC`: tiny projects with one bug each.

Each task is a module `calc.py` with one wrong line and a check (asserts) that fails on it. A task's
project is written to a folder with a failing pytest test of the check, so a drafter sees what it
sees in a run: the failing test, its message and the suspicious line. A draft passes when its edit,
applied to `calc.py`, makes the check pass.

The check runs the drafted code in a plain subprocess (`python -E -s`, in a temporary folder, with a
timeout), not in ralph's sandbox: the tasks are ours and the drafts touch only `calc.py`, but a
model's draft is still arbitrary code run unsandboxed. Run the bench where that is acceptable.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ralph.domain.candidate import PROTECTED_TESTS
from ralph.domain.protocols import DraftContext
from ralph.domain.results import TestResult

MODULE = "calc.py"
CHECK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class BugTask:
    """One one-bug task: the module with its bug, the line of the bug, the fixed module and the
    check (statements run after `from calc import *`)."""

    name: str
    source: str
    line: int
    fixed: str
    check: str

    @property
    def function(self) -> str:
        """The name of the function with the bug (the first one defined)."""
        return self.source.split("(", 1)[0].removeprefix("def ")


def _task(name: str, source: str, wrong: str, right: str, check: str) -> BugTask:
    line = next(i for i, text in enumerate(source.splitlines(), 1) if wrong in text)
    return BugTask(name, source, line, source.replace(wrong, right), check)


TASKS = (
    _task("add", "def add(a, b):\n    return a - b\n", "a - b", "a + b", "assert add(2, 3) == 5"),
    _task(
        "largest", "def largest(xs):\n    return min(xs)\n", "min(", "max(", "assert largest([3, 9, 4]) == 9"
    ),
    _task("shout", "def shout(s):\n    return s.lower()\n", "lower", "upper", "assert shout('hi') == 'HI'"),
    _task("last", "def last(xs):\n    return xs[0]\n", "xs[0]", "xs[-1]", "assert last([1, 2, 3]) == 3"),
    _task("double", "def double(x):\n    x * 2\n", "    x * 2", "    return x * 2", "assert double(4) == 8"),
)
"""Five one-line bugs of the kind even a small model can fix: an operator, a builtin, a method, an
index, a missing `return` (from tests/realmodel.py's TRIVIAL set)."""


def write_project(task: BugTask, folder: Path) -> Path:
    """The task as a project in `folder`: calc.py and a pytest test of the check."""
    (folder / "tests").mkdir(parents=True, exist_ok=True)
    (folder / MODULE).write_text(task.source, encoding="utf-8")
    body = "\n".join(f"    {line}" for line in task.check.splitlines())
    test = f"from calc import {task.function}\n\n\ndef test_{task.name}():\n{body}\n"
    (folder / "tests" / "test_calc.py").write_text(test, encoding="utf-8")
    return folder


def draft_context(task: BugTask, project: Path, state_id: int = 1) -> DraftContext:
    """What a drafter sees for the task: its failing test, the message and the bug's line."""
    failure = TestResult(
        nodeid=f"tests/test_calc.py::test_{task.name}",
        outcome="failed",
        message=f"AssertionError: {task.check.splitlines()[0]}",
        frames=((MODULE, task.line, task.function),),
    )
    return DraftContext(
        task=f"fix {task.function}",
        project=project,
        state_id=state_id,
        failing_tests=(failure,),
        diagnostics=(),
        failing_checks=("pytest",),
        suspicious=((MODULE, task.line),),
        protected=PROTECTED_TESTS,
    )


def passes(task: BugTask, module: str, timeout_s: float = CHECK_TIMEOUT_S) -> bool:
    """Whether the task's check passes on `module` (the new text of calc.py), run in a subprocess of
    this interpreter, without the environment's PYTHON* variables and user site (`-E -s`; `-I` would
    also drop the script's folder from the path), in a fresh temporary folder; a check
    still running at `timeout_s` fails."""
    with tempfile.TemporaryDirectory(prefix="ralph-bench-task-") as tmp:
        (Path(tmp) / MODULE).write_text(module, encoding="utf-8")
        (Path(tmp) / "check.py").write_text(f"from calc import *\n{task.check}\n", encoding="utf-8")
        try:
            done = subprocess.run(
                [sys.executable, "-E", "-s", "check.py"],
                cwd=tmp,
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
    return done.returncode == 0
