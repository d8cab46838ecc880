"""An edit that special-cases the failing test (compares an input with the test's value, or returns
the value it expects): the pure reading (`special_cases`, `literals_of_test`), and the stage rejecting
such a fix on a real repository, the right fix accepted after it; warned about only, or not looked
for when the rule is off."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from ralph.config import RunConfig
from ralph.domain.candidate import Candidate, FileChange
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import Workspace
from ralph.session import fix
from ralph.trace import read_trace
from ralph.validators.facts import VerifySettings
from ralph.validators.pipeline import Verifier
from ralph.validators.special_case import literal_key, literals_of_test, special_cases
from ralph.validators.toolchain import Toolchain
from ralph.view import QuietView
from tests.conftest import git, write_files

# HumanEvalFix's shape: the asserts in `check`, which the test calls with the function.
CHECKS = """from solution import *  # noqa: F403


def check(candidate):
    assert candidate(42) == 7
    assert candidate("abc") == "cba"


def test_solve():
    check(solve)
"""
TEST = "test_solution.py::test_solve"
SOLVE = "def solve(n):\n    return n // 6\n"


def _found(before: str, after: str, test: str = CHECKS) -> list[str]:
    return [c.message() for c in special_cases(before, after, {TEST: literals_of_test(test, TEST)})]


def test_an_added_comparison_with_the_tests_input_and_its_expected_value_returned_are_found():
    after = SOLVE.replace("    return", "    if n == 42:\n        return 7\n    return")
    assert _found(SOLVE, after) == [f"solve now compares `n` with 42, a value of the failing test {TEST}"]
    outright = "def solve(n):\n    return 7\n"
    assert _found(SOLVE, outright) == [f"solve now returns 7, a value of the failing test {TEST}"]
    guarded = "def solve(n):\n    try:\n        return 7\n    except ValueError:\n        raise\n"
    assert _found(SOLVE, guarded) == [f"solve now returns 7, a value of the failing test {TEST}"]
    member = SOLVE.replace("    return", "    if n in ('abc', 'xyz'):\n        return n[::-1]\n    return")
    assert _found(SOLVE, member) == [f"solve now compares `n` with 'abc', a value of the failing test {TEST}"]
    reversed_ = SOLVE.replace("    return", "    if 42 == abs(n):\n        pass\n    return")
    assert _found(SOLVE, reversed_) == [
        f"solve now compares `abs(n)` with 42, a value of the failing test {TEST}"
    ]


def test_a_literal_the_module_already_held_is_no_special_case():
    """A fix that puts back a value the module uses (`tablefmt == "grid"`) is no special case."""
    before = "LIMIT = 42\n\n\ndef solve(n):\n    return n // 6\n"
    assert _found(before, before.replace("    return", "    if n == 42:\n        return 0\n    return")) == []
    within = "def solve(n):\n    return n // 7\n"
    assert _found(within, "def solve(n):\n    return 7 if n else n // 7\n") == []


def test_a_comparison_or_a_returned_literal_the_edit_changed_rather_than_added_is_no_special_case():
    """The true fixes of two mutants: tabulate's `_isbool` compared `string` with "false" (its test's
    "False"), pyasn1's `prettyPrint` returned '' (its test's '<overflow>')."""
    test = "def test_it():\n    assert solve('False') == '<overflow>'\n"
    node = "t.py::test_it"
    tests = {node: literals_of_test(test, node)}
    compares = "def solve(s):\n    return s in ('True', 'false')\n"
    assert special_cases(compares, compares.replace("'false'", "'False'"), tests) == []
    returns = "def solve(s):\n    if s:\n        return ''\n    return s\n"
    assert special_cases(returns, returns.replace("''", "'<overflow>'"), tests) == []
    added = returns.replace("    return s\n", "    return '<overflow>'\n")
    assert [c.message() for c in special_cases(returns, added, tests)] == [
        "solve now returns '<overflow>', a value of the failing test t.py::test_it"
    ]


def test_a_missing_case_added_with_the_value_it_returns_is_no_special_case():
    """A branch that returns the test's expected value under a condition that is no special case
    is how a missing case is added (the review's fizzbuzz, February's 29)."""
    test = "def test_fifteen():\n    assert fizzbuzz(15) == 'FizzBuzz'\n"
    node = "t.py::test_fifteen"
    before = (
        "def fizzbuzz(n):\n    if n % 3 == 0:\n        return 'Fizz'\n"
        "    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)\n"
    )
    fixed = before.replace("    if n % 3", "    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3", 1)
    assert special_cases(before, fixed, {node: literals_of_test(test, node)}) == []


def test_trivial_literals_ordering_and_values_of_no_failing_test_are_no_special_case():
    trivial = "def solve(n):\n    if n == 0 or n is None:\n        return ''\n    return n // 6\n"
    assert _found(SOLVE, trivial) == []
    assert _found(SOLVE, SOLVE.replace("    return", "    if n < 42:\n        n += 1\n    return")) == []
    assert _found(SOLVE, SOLVE.replace("    return", "    if n == 43:\n        return 8\n    return")) == []
    constant = SOLVE.replace("    return", "    if LIMIT == 42:\n        pass\n    return")
    assert _found(SOLVE, constant) == []  # (not an input: a module's constant)
    # A loop's item compared with a character: how a parser reads its input (HumanEvalFix's true fix
    # of correct_bracketing compares `b` with "<", a value of its test).
    reads = "def solve(s):\n    for c in s:\n        if c == '>':\n            return c\n    return s\n"
    test = "def test_solve():\n    assert solve('<') == '<'\n"
    node = "t.py::test_solve"
    assert special_cases(reads, reads.replace("'>'", "'<'"), {node: literals_of_test(test, node)}) == []


def test_literals_are_compared_by_value_and_kind():
    keys = {literal_key(ast_of(text)) for text in ("2", "2.0", "True", "1")}
    assert len(keys) == 3  # (2 is 2.0, as Python compares them; True is no number)
    assert literal_key(ast_of("-5")) == ("number", -5) and literal_key(ast_of("x")) is None
    test = "def test_half():\n    assert solve(2.0) == 'yes'\n"
    node = "t.py::test_half"
    assert literals_of_test(test, node) == {literal_key(ast_of("2.0")), literal_key(ast_of("'yes'"))}
    after = "def solve(n):\n    if n == 2:\n        return 'yes'\n    return n // 6\n"
    assert [c.literal for c in special_cases(SOLVE, after, {node: literals_of_test(test, node)})] == ["2"]


def ast_of(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def test_a_tests_literals_include_its_parametrize_its_table_and_its_class():
    source = """import pytest

CASES = [(5, 120)]


class TestSolve:
    @pytest.mark.parametrize("n, want", CASES)
    def test_cases(self, n, want):
        assert solve(n) == want

    def test_other(self):
        assert solve(9) == 11
"""
    found = literals_of_test(source, "t.py::TestSolve::test_cases[5-120]")
    assert {literal_key(ast_of(v)) for v in ("5", "120", "(5, 120)")} <= found
    assert literal_key(ast_of("9")) not in found
    assert literals_of_test(source, "t.py::TestSolve::test_missing") == frozenset()
    assert literals_of_test("def broken(:\n", "t.py::test") == frozenset()


FACTORIAL = (
    "def factorial(n):\n    result = 1\n    for i in range(1, n):\n        result *= i\n    return result\n"
)
SPECIAL = FACTORIAL.replace("    result = 1\n", "    if n == 5:\n        return 120\n    result = 1\n")
RIGHT = FACTORIAL.replace("range(1, n)", "range(1, n + 1)")
PROJECT = {
    "fact.py": FACTORIAL,
    "tests/test_fact.py": "from fact import factorial\n\n\ndef test_five():\n    assert factorial(5) == 120\n",
}


def _run(repo: Path, tmp_path: Path, **config: object):
    file = tmp_path / "edits.jsonl"
    records = [
        {"description": "special-case 5", "files": {"fact.py": SPECIAL}},
        {"files": {"fact.py": RIGHT}},
    ]
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    settings = RunConfig(drafter=f"replay:{file}", candidates=1, **config)
    return fix(repo, settings, view=QuietView(notices=False))


def test_a_fix_that_special_cases_the_failing_test_is_rejected_and_the_right_one_accepted(
    make_repo, tmp_path
):
    repo = make_repo(PROJECT)
    outcome = _run(repo, tmp_path)
    first, second = (r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    [rejected] = first["candidates"]
    assert rejected["verdict"] == "rejected" and rejected["failed_stage"] == "special-case"
    assert (
        "factorial now compares `n` with 5, a value of the failing test tests/test_fact.py::test_five"
        in rejected["reason"]
    )
    assert second["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:fact.py") == RIGHT


def test_with_warn_it_is_said_in_the_trace_and_accepted(make_repo, tmp_path):
    repo = make_repo(PROJECT)
    outcome = _run(repo, tmp_path, plausibility="warn")
    first = next(r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    [accepted] = first["candidates"]
    assert accepted["verdict"] == "accepted"
    stage = next(s for s in accepted["stages"] if s["stage"] == "special-case")
    assert "warning: fact.py:2: factorial now compares `n` with 5" in stage["detail"]


def test_a_project_can_turn_the_rule_off_alone(tmp_path):
    write_files(tmp_path / "ws", PROJECT)
    workspace = Workspace(tmp_path / "ws")
    toolchain = Toolchain(sys.executable, LocalSandbox(), workspace.project)
    verifier = Verifier(toolchain, VerifySettings(semantic_off=frozenset({"special-case"})))
    try:
        state, _ = verifier.baseline()
        special = FileChange("fact.py", FACTORIAL, SPECIAL)
        workspace.apply([special])
        report = verifier.verify(
            Candidate("test", "special-case 5", (special,)), state, reset=workspace.restore
        )
        assert report.accepted, report.reason
        stages = [s.stage for s in report.stages]
        assert "plausibility" in stages and "special-case" not in stages
    finally:
        verifier.close()
