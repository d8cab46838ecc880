"""Signs of a wrong fix that weak tests let through, with real ruff on real repositories: a candidate
that leaves a parameter of the function it edits unused is rejected with the parameter's name (or only
warned about, when the project says so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.domain.candidate import FileChange
from ralph.sandboxes.local import LocalSandbox
from ralph.session import fix
from ralph.trace import read_trace
from ralph.validators.plausibility import PlausibilityValidator, changed_functions
from ralph.validators.toolchain import Toolchain, ruff_bin
from ralph.view import QuietView
from tests.conftest import git

CLAMP = {
    "calc.py": "def clamp(value, low, high):\n    return max(low, min(value, low))\n",
    # Weak: a fix that ignores `high` passes it too.
    "tests/test_calc.py": "from calc import clamp\n\n\ndef test_clamp():\n    assert clamp(5, 0, 10) == 5\n",
}
IGNORES_HIGH = "def clamp(value, low, high):\n    return max(low, max(value, low))\n"
FIXED = "def clamp(value, low, high):\n    return max(low, min(value, high))\n"


def _run(repo: Path, tmp_path: Path, **config: object):
    file = tmp_path / "edits.jsonl"
    records = [
        {"description": "ignore high", "files": {"calc.py": IGNORES_HIGH}},
        {"files": {"calc.py": FIXED}},
    ]
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    settings = RunConfig(drafter=f"replay:{file}", candidates=1, **config)
    return fix(repo, settings, view=QuietView(notices=False))


def test_a_fix_that_leaves_a_parameter_unused_is_rejected_naming_it(make_repo, tmp_path):
    repo = make_repo(CLAMP)
    outcome = _run(repo, tmp_path)
    first, second = (r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    [rejected] = first["candidates"]
    assert rejected["verdict"] == "rejected" and rejected["failed_stage"] == "plausibility"
    assert "parameter `high` becomes unused" in rejected["reason"]
    assert second["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:calc.py") == FIXED


def test_with_warn_it_is_said_in_the_trace_and_accepted(make_repo, tmp_path):
    repo = make_repo(CLAMP)
    outcome = _run(repo, tmp_path, plausibility="warn")
    first = next(r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    [accepted] = first["candidates"]
    assert accepted["verdict"] == "accepted"
    stage = next(s for s in accepted["stages"] if s["stage"] == "plausibility")
    assert "warning: calc.py:1: parameter `high` becomes unused (ARG001)" in stage["detail"]


@pytest.mark.slow
def test_semantic_is_the_modes_name_and_a_project_can_turn_one_rule_off(make_repo, tmp_path):
    repo = make_repo(CLAMP)
    warned = _run(repo, tmp_path, semantic="warn")
    first = next(r for r in read_trace(warned.trace) if r["type"] == "iteration")
    assert first["candidates"][0]["verdict"] == "accepted"
    # (`high` was unused before the edit too: ARG001 is the only rule that sees it)
    other = _run(make_repo(CLAMP, "other"), tmp_path, semantic_off=["flow-cut", "F841"])
    first = next(r for r in read_trace(other.trace) if r["type"] == "iteration")
    assert "ARG001 parameter `high` becomes unused" in first["candidates"][0]["reason"]
    off = _run(make_repo(CLAMP, "off"), tmp_path, semantic_off=["ARG001"])
    first = next(r for r in read_trace(off.trace) if r["type"] == "iteration")
    assert first["candidates"][0]["verdict"] == "accepted"


def test_an_unknown_semantic_rule_is_bad_input(make_repo):
    from tests.conftest import run_ralph

    repo = make_repo({**CLAMP, "pyproject.toml": '[tool.ralph]\nsemantic_off = ["flowcut"]\n'})
    proc = run_ralph("fix", str(repo))
    assert proc.returncode == 2 and "unknown rule 'flowcut'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_only_the_functions_an_edit_changed_are_judged(tmp_path):
    before = "def a(x, unused):\n    return x\n\n\ndef b(y):\n    return y + 1\n"
    after = before.replace("y + 1", "y + 2")
    assert changed_functions(before, after) == [(5, 6)]
    checker = PlausibilityValidator(Toolchain("python3", LocalSandbox(), tmp_path), ruff_bin())
    assert checker.start([FileChange("m.py", before, after)])().ok  # `a` keeps its unused parameter
    touched = after.replace("return x", "return x * 1")
    result = checker.start([FileChange("m.py", before, touched)])()
    assert not result.ok and "parameter `unused` becomes unused" in result.detail
    itself = before.replace("return y + 1", "return y == y")
    assert "compared with itself" in checker.start([FileChange("m.py", before, itself)])().detail


def test_branches_that_were_already_the_same_are_the_projects_own_not_the_edits(tmp_path):
    """pyflakes has `if`/`elif` branches with the same body on purpose: a fix elsewhere in that
    function is no reason to reject it; branches an edit makes the same still are."""
    before = (
        "def kind(x):\n    if x < 0:\n        return 'small'\n    elif x > 99:\n        return 'small'\n"
        "    return 'big' + str(x + 1)\n"
    )
    checker = PlausibilityValidator(Toolchain("python3", LocalSandbox(), tmp_path), ruff_bin())
    fix = before.replace("x + 1", "x")
    assert checker.start([FileChange("m.py", before, fix)])().ok
    differ = before.replace("return 'small'\n    return", "return 'tiny'\n    return")
    made_same = FileChange("m.py", differ, before)
    result = checker.start([made_same])()
    assert not result.ok and "two branches became the same" in result.detail


def test_unused_parameters_of_an_interface_are_the_projects_own(tmp_path):
    """A method's parameter unused before the edit (pyasn1's `decodeFun`), or a function's whose
    name other functions of the module take (tabulate's `colwidths` callbacks), does not make a fix
    implausible; a function the edit leaves unusing a parameter it used, while the module's other
    functions use it, does."""
    checker = PlausibilityValidator(Toolchain("python3", LocalSandbox(), tmp_path), ruff_bin())
    method = "class Codec:\n    def decode(self, data, decodeFun):\n        return data[1:]\n"
    assert checker.start([FileChange("m.py", method, method.replace("[1:]", "[2:]"))])().ok
    family = (
        "def plain(widths, aligns):\n    return '-'\n\n\n"
        "def piped(widths, aligns):\n    return '|' * len(widths) + str(aligns)\n"
    )
    assert checker.start([FileChange("m.py", family, family.replace("'-'", "'+'"))])().ok
    using = family.replace("return '-'", "return '-' * len(widths) + str(aligns)")
    result = checker.start([FileChange("m.py", using, using.replace("'|' * len(widths)", "'|' * 2"))])()
    assert not result.ok and "parameter `widths` becomes unused" in result.detail


def test_turning_a_rule_off_never_makes_another_stricter(tmp_path):
    """The interface excuse counts the functions of both kinds (ARG001, ARG002) that ignore a
    parameter: with ARG002 off, a method that ignores `decodeFun` still excuses a function that now
    does (the review's case: turned off, ARG002's findings vanished and the fix was rejected)."""
    before = (
        "class A:\n    def decode(self, data, decodeFun):\n        return data\n\n\n"
        "def decode(data, decodeFun):\n    return decodeFun(data)\n"
    )
    after = before.replace("return decodeFun(data)", "return data")
    for off in ((), ("flow-cut",), ("flow-cut", "ARG002")):
        checker = PlausibilityValidator(Toolchain("python3", LocalSandbox(), tmp_path), ruff_bin(), off=off)
        assert checker.start([FileChange("m.py", before, after)])().ok, off


def test_an_identical_line_elsewhere_excuses_nothing_the_edit_did(tmp_path):
    """Excused is the same finding on the same line of the accepted text, not on a line that reads
    the same: `f` has two branches the same on purpose, and the edit makes `g`'s the same."""
    checker = PlausibilityValidator(Toolchain("python3", LocalSandbox(), tmp_path), ruff_bin())
    same = "    if x is None:\n        return 0\n    elif x < 0:\n        return 0\n    return x\n"
    before = (
        "def f(x):\n"
        + same
        + "\n\ndef g(x):\n"
        + same.replace("return 0\n    return x", "return 1\n    return x")
    )
    result = checker.start([FileChange("m.py", before, before.replace("return 1", "return 0"))])()
    assert not result.ok and "two branches became the same" in result.detail


def test_a_parameter_other_functions_leave_unused_too_is_an_interfaces(tmp_path):
    """pyasn1's decoders take `decodeFun` and most ignore it: a fix that stops using it again is
    no implausible fix; a lone function's parameter left unused still is."""
    checker = PlausibilityValidator(Toolchain("python3", LocalSandbox(), tmp_path), ruff_bin())
    codecs = (
        "class A:\n    def decode(self, data, decodeFun):\n        return data\n\n\n"
        "class B:\n    def decode(self, data, decodeFun):\n        return decodeFun(data)\n"
    )
    fix = FileChange("m.py", codecs, codecs.replace("return decodeFun(data)", "return data[1:]"))
    assert checker.start([fix])().ok


def test_a_variable_already_unused_on_a_line_the_edit_left_is_the_projects_own(tmp_path):
    """boltons' `get_path` binds `except TypeError as exc` and never reads it: the true fix of a
    mutant elsewhere in that function did not make it unused. One the edit makes unused is."""
    checker = PlausibilityValidator(Toolchain("python3", LocalSandbox(), tmp_path), ruff_bin())
    before = (
        "def get(cur, seg):\n    try:\n        return cur[seg + 1]\n"
        "    except TypeError as exc:\n        return None\n"
    )
    assert checker.start([FileChange("m.py", before, before.replace("seg + 1", "seg"))])().ok
    used = "def get(cur, seg):\n    total = seg + 1\n    return cur[total]\n"
    result = checker.start([FileChange("m.py", used, used.replace("cur[total]", "cur[seg]"))])()
    assert not result.ok and "variable `total` becomes unused" in result.detail


def test_catch_all_parameters_already_unused_are_the_projects_own(tmp_path):
    """pyasn1's `plug(self, *args, **kw)` absorbs any call and raises: the true fix of a mutant in
    the function around it left them as they were."""
    checker = PlausibilityValidator(Toolchain("python3", LocalSandbox(), tmp_path), ruff_bin())
    before = (
        "def make(name, skip):\n    def plug(*args, **kw):\n        raise TypeError(name)\n\n"
        "    return None if name not in skip else plug\n"
    )
    assert checker.start([FileChange("m.py", before, before.replace("not in", "in"))])().ok
