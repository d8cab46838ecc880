"""`ralph precommit [FILES...]`: the command behind the pre-commit hooks.

`--check` (hook `ralph-check`) runs the validators on the given files, fast and without a model:
syntax, ruff, and the test modules that import them. `--fix` (hook `ralph-fix`) runs a bounded loop
that may edit only those files, starting from what is staged, and writes a fix into the working tree,
which fails the commit so the user can look and re-stage (pre-commit's convention). A file with
unstaged changes is never written. The run's `ralph/<run-id>` branch goes once the working tree holds
all it holds (a hook runs at every commit: it would leave a branch each time); it stays, and is
named, only when it holds a fix that was not written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.domain.candidate import PROTECTED_TESTS, FileChange, is_protected
from ralph.domain.results import Scope
from ralph.gitops import delete_branch, differing_paths, open_repo
from ralph.sandboxes.local import LocalSandbox
from ralph.validators.pytest_run import PytestValidator
from ralph.validators.ruff import RuffValidator
from ralph.validators.selection import ImportGraph, project_sources, select_tests
from ralph.validators.syntax import SyntaxValidator
from ralph.validators.toolchain import Toolchain, find_python

if TYPE_CHECKING:
    from ralph.session import FixOutcome


def _python_files(root: Path, files: list[str]) -> list[str]:
    return [f for f in dict.fromkeys(files) if f.endswith(".py") and (root / f).is_file()]


def affected_tests(root: Path, files: list[str]) -> list[str]:
    """Test modules that import the files (transitively), and the files that are tests themselves."""
    sources = project_sources(root)
    changes = [FileChange(f, None, sources.get(f, "")) for f in files]  # "new": coverage cannot vouch
    selection = select_tests(changes, {}, ImportGraph(sources), lambda p: is_protected(p, PROTECTED_TESTS))
    return selection.tests


def check(repo: Path, files: list[str], python: str | None = None) -> int:
    """Validators on `files`; 0 when they pass, 1 otherwise (with one line per problem)."""
    root, _ = open_repo(repo)
    files = _python_files(root, files)
    if not files:
        return 0
    # The checks run in the user's own tree: they must leave no bytecode caches behind.
    toolchain = Toolchain(
        find_python(root, root, python), LocalSandbox(), root, {"PYTHONDONTWRITEBYTECODE": "1"}
    )
    problems: list[str] = []
    syntax = SyntaxValidator(toolchain).check(Scope(paths=tuple(files)))
    problems += list(syntax.syntax_errors.values())
    if not problems:
        lint = RuffValidator(toolchain).check(Scope(paths=tuple(files)))
        problems += [f"{d.path}:{d.line}: {d.code} {d.message}" for d in lint.diagnostics]
        tests = affected_tests(root, files)
        if tests:
            result = PytestValidator(toolchain).check(Scope(tests=tuple(tests), timeout_s=600))
            problems += [f"{t.nodeid}: {t.outcome}" for t in result.tests if t.failing]
    for problem in problems:
        print(f"ralph: {problem}", file=sys.stderr)
    return 1 if problems else 0


def fix(repo: Path, files: list[str], max_iterations: int = 5, max_seconds: float = 120.0) -> int:
    """A bounded loop limited to `files`; 1 when it changed them (re-stage) or could not fix them."""
    from ralph.config import load_config
    from ralph.session import fix as run_fix
    from ralph.view import QuietView

    root, _ = open_repo(repo)
    files = _python_files(root, files)
    tests = affected_tests(root, files) if files else []
    if not tests:
        return check(repo, files)  # nothing a loop could be judged by: only the validators
    config = load_config(root, {"tests": tests, "max_iterations": max_iterations, "max_seconds": max_seconds})
    outcome = run_fix(root, config, view=QuietView(), staged=True, only=files, apply=True)
    if outcome.applied:
        rest = _drop_branch(outcome)
        print(f"ralph: fixed {', '.join(outcome.applied)}{rest}; review and re-stage", file=sys.stderr)
        return 1
    if outcome.apply_refused:
        print(
            f"ralph: a fix is on branch {outcome.branch}; files with unstaged changes were not written",
            file=sys.stderr,
        )
        return 1
    if outcome.result.outcome == "goal":
        return 0
    print(
        f"ralph: could not fix the staged files ({outcome.result.outcome}); trace: {outcome.trace}",
        file=sys.stderr,
    )
    return 1


def _drop_branch(outcome: FixOutcome) -> str:
    """The fix is in the working tree: the run's branch, holding nothing more, is deleted. One that
    holds more than was written (a path git ignores) stays: what to add to the line that says so."""
    toplevel, branch, tip = outcome.toplevel, outcome.branch, outcome.final_commit
    if toplevel is None or branch is None or tip is None or outcome.base_commit is None:
        return ""
    left = sorted(set(differing_paths(toplevel, outcome.base_commit, tip)) - set(outcome.applied))
    if left:
        return f" (not written, on branch {branch}: {', '.join(left)})"
    delete_branch(toplevel, branch, tip)
    return ""
