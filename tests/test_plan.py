"""The plan is built from the registry of stages: the order a candidate meets them in, and a stage
registered for no step refused (a validator of one's own, added with one module and one entry as
docs/extending.md shows it, is run by tests/test_docs_examples.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ralph.sandboxes.local import LocalSandbox
from ralph.validators.facts import VerifySettings
from ralph.validators.pipeline import Verifier
from ralph.validators.plan import STAGES, Entry, Plan
from ralph.validators.toolchain import Toolchain
from ralph.validators.tools import Tools


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
            ["mypy", "ruff", "plausibility", "special-case", "deleted-behaviour", "api"],
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
