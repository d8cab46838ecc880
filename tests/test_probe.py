"""The regression probe: with the gate beside the loop, an improving candidate meets the passing tests
that ran a changed line before its state is taken; a failure there is confirmed by the whole gate in
line, so a suite whose tests depend on their order never loses a correct fix to it."""

from __future__ import annotations

import sys
from pathlib import Path

from ralph.domain.candidate import Candidate, FileChange
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import Workspace
from ralph.validators.facts import VerifySettings
from ralph.validators.pipeline import Verifier
from ralph.validators.toolchain import Toolchain
from tests.conftest import write_files

CALC = "def double(x):\n    return x + 2\n"
REGRESSING = {
    "calc.py": CALC,
    "tests/test_calc.py": (
        "from calc import double\n\n\n"
        "def test_double_of_two():\n    assert double(2) == 4\n\n\n"
        "def test_double_of_three():\n    assert double(3) == 6\n"
    ),
}
ORDER_DEPENDENT = {
    "calc.py": CALC,
    "tests/test_calc.py": (
        "from calc import double\n\nSEEN = []\n\n\n"
        "def test_a_records():\n    SEEN.append(1)\n\n\n"
        "def test_b_needs_a():\n    assert double(0) in (0, 2)\n    assert SEEN == [1]\n\n\n"
        "def test_double_of_three():\n    assert double(3) == 6\n"
    ),
}


def verify(tmp_path: Path, files: dict[str, str], after: str, background: bool = True):
    write_files(tmp_path / "ws", files)
    workspace = Workspace(tmp_path / "ws")
    toolchain = Toolchain(sys.executable, LocalSandbox(), workspace.project)
    verifier = Verifier(toolchain, VerifySettings(background=background))
    try:
        state, _ = verifier.baseline()
        change = FileChange("calc.py", CALC, after)
        workspace.apply([change])
        return verifier.verify(Candidate("test", "edit", (change,)), state, reset=workspace.restore)
    finally:
        verifier.close()


def test_a_regression_is_caught_before_the_state_is_taken(tmp_path: Path) -> None:
    # Fixes double(3) and breaks double(2): improving on the targeted tests, regressing beside them.
    report = verify(tmp_path, REGRESSING, "def double(x):\n    return x + 3\n")
    assert not report.accepted and report.failed_stage == "gate", report.reason
    assert "test_double_of_two" in report.reason
    gate = next(s for s in report.stages if s.stage == "gate")
    assert "the probe saw tests/test_calc.py::test_double_of_two fail" in gate.detail


def test_a_fix_passes_its_probe_and_is_taken_provisionally(tmp_path: Path) -> None:
    report = verify(tmp_path, REGRESSING, "def double(x):\n    return x * 2\n")
    assert report.accepted and not report.gated, report.reason
    probe = next(s for s in report.stages if s.stage == "probe")
    assert [t.nodeid for t in probe.tests] == ["tests/test_calc.py::test_double_of_two"]


def test_an_order_dependent_failure_of_the_probe_does_not_reject_a_correct_fix(tmp_path: Path) -> None:
    # test_b_needs_a ran the changed line and fails when run without test_a_records before it.
    report = verify(tmp_path, ORDER_DEPENDENT, "def double(x):\n    return x * 2\n")
    assert report.accepted, report.reason
    gate = next(s for s in report.stages if s.stage == "gate")
    assert "the probe saw tests/test_calc.py::test_b_needs_a fail" in gate.detail and gate.ok


def test_with_the_gate_in_line_there_is_no_probe(tmp_path: Path) -> None:
    report = verify(tmp_path, REGRESSING, "def double(x):\n    return x + 3\n", background=False)
    assert not report.accepted and not any(s.stage == "probe" for s in report.stages)
