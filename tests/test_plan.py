"""The plan is built from the registry of stages: the order a candidate meets them in, and a validator
of one's own added with one module and one entry, exactly as docs/extending.md shows it."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from ralph.domain.candidate import Candidate, FileChange
from ralph.sandboxes.local import LocalSandbox
from ralph.sandboxes.workspace import Workspace
from ralph.validators.facts import VerifySettings
from ralph.validators.pipeline import Verifier
from ralph.validators.plan import STAGES, Entry, Plan
from ralph.validators.toolchain import Toolchain
from ralph.validators.tools import Tools
from tests.conftest import write_files

DOC = Path(__file__).resolve().parent.parent / "docs" / "extending.md"
PROJECT = {
    "calc.py": "def double(x):\n    return x + 2\n",
    "tests/test_calc.py": "from calc import double\n\n\ndef test_double():\n    assert double(3) == 6\n",
}


def the_docs_validator() -> tuple[types.ModuleType, str]:
    """The module and the registry entry docs/extending.md gives, as written there."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    module = types.ModuleType("no_print")
    exec(compile(blocks[0], str(DOC), "exec"), module.__dict__)
    return module, blocks[1].strip()


def names(steps) -> list[list[str]]:
    return [[s.name for s in step.stages] for step in steps]


def test_the_plan_meets_the_stages_in_the_registrys_steps(tmp_path: Path) -> None:
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    verifier = Verifier(toolchain, VerifySettings(warm=False))
    try:
        plan = verifier.plan
        assert names(plan.sequence) == [
            ["syntax", "ruff", "format"],
            ["tests", "checks", "mypy"],
            ["mypy", "plausibility", "special-case", "deleted-behaviour", "api"],
            ["probe"],
            ["gate"],
            ["checks"],
        ]
        assert plan.static.stages == plan.sequence[0].stages and plan.sequence[0].repair is not None
        assert names(plan.gate) == [["gate"], ["checks"]]
        assert names(plan.detection) == [["syntax", "ruff"], ["tests"], ["mypy"]]
        beside = Plan.build(verifier.tools, background=True)
        assert names(beside.sequence) == names(plan.sequence)[:4]  # the gate runs beside the loop
    finally:
        verifier.close()


def test_a_stage_registered_for_no_step_is_refused(tmp_path: Path) -> None:
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    tools = Tools.build(toolchain, VerifySettings(warm=False), (), Verifier(toolchain).facts)
    with pytest.raises(ValueError, match="registered for no step: later"):
        Plan.build(tools, False, (*STAGES, Entry("later", lambda t: STAGES[0].make(t))))


def test_the_docs_validator_rejects_what_it_should_with_one_entry(tmp_path: Path) -> None:
    module, entry_text = the_docs_validator()
    entry = eval(entry_text, {"Entry": Entry, "NoPrintStage": module.NoPrintStage})
    write_files(tmp_path / "ws", PROJECT)
    workspace = Workspace(tmp_path / "ws")
    toolchain = Toolchain(sys.executable, LocalSandbox(), workspace.project)
    verifier = Verifier(toolchain, VerifySettings(), registry=(*STAGES, entry))
    fixed = "def double(x):\n    return x * 2\n"
    try:
        state, _ = verifier.baseline()
        noisy = FileChange(
            "calc.py", PROJECT["calc.py"], fixed.replace("    return", "    print(x)\n    return")
        )
        workspace.apply([noisy])
        report = verifier.verify(Candidate("test", "fix, printing", (noisy,)), state, reset=workspace.restore)
        workspace.rollback([noisy])
        assert not report.accepted and report.failed_stage == "no-print"
        assert "the edit adds a print() call" in report.reason
        clean = FileChange("calc.py", PROJECT["calc.py"], fixed)
        workspace.apply([clean])
        report = verifier.verify(Candidate("test", "fix", (clean,)), state, reset=workspace.restore)
        assert report.accepted, report.reason
        assert any(s.stage == "no-print" and s.ok for s in report.stages)
    finally:
        verifier.close()
