"""The registry of stages and the plan built from it: the order a candidate meets the stages in.

A candidate meets the steps in `STEPS` order, each step the registry's stages for it, run together
(each step only if the ones before it passed):

- `static`: syntax, ruff and the project's format (a failure of only safely fixable diagnostics is
  repaired, never rejected for: `repairs.SafeFixes`);
- `targeted`: the failing tests that can see the change until one passes, the failing checks and,
  when the state has type errors, the type checker: must improve;
- `settled` (on the workspace put back, only for a candidate that improves): the type checker again,
  `ruff check` where the static step took the resident ruff server's word, and the semantic stages
  (plausibility, special-case, deleted-behaviour, API): must still improve;
- `probe` (only with the gate beside the loop): the passing tests that ran a changed line, a failure
  confirmed by the whole gate in line before it rejects;
- `gate`: the whole suite in a fresh child; `gate-checks`: every check, on the state put back: must
  improve. With the gate beside the loop (`background`) a verification ends before these two.

Adding a validator is one module (its validator and a stage: `name`, `wanted(attempt)`,
`run(attempt)`) and one `Entry` in `STAGES`; docs/extending.md shows one, and
tests/test_plan.py runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ralph.validators.deleted import DeletedBehaviourStage
from ralph.validators.repairs import SafeFixes
from ralph.validators.special_case import SpecialCaseStage
from ralph.validators.stages import (
    AllChecksStage,
    ApiStage,
    FailingChecksStage,
    FailingTestsStage,
    FormatStage,
    GateStage,
    LintStage,
    PlausibilityStage,
    ProbeStage,
    SelectedTestsStage,
    Stage,
    Step,
    SyntaxStage,
    TypesStage,
    put_back,
    select_ahead,
)
from ralph.validators.tools import Tools


@dataclass(frozen=True)
class Entry:
    """A stage of the plan: the step it runs in, and how it is made from a copy's validators."""

    step: str
    make: Callable[[Tools], Stage]


STAGES: tuple[Entry, ...] = (
    Entry("static", lambda t: SyntaxStage(t.syntax)),
    Entry("static", lambda t: LintStage(t.ruff)),
    # Formatting is last: a candidate it rejects is formatted by the repair, never rejected for it.
    Entry("static", lambda t: FormatStage(t.format)),
    Entry("targeted", lambda t: FailingTestsStage(t.tests)),
    Entry("targeted", lambda t: FailingChecksStage(t.checks)),
    Entry("targeted", lambda t: TypesStage()),
    Entry("settled", lambda t: TypesStage(settled=True)),
    Entry("settled", lambda t: LintStage(t.ruff, settled=True)),
    # Only for a candidate that improves (beside the second type check): one the static stages or the
    # targeted tests reject, the rejection path, never pays for them.
    Entry("settled", lambda t: PlausibilityStage(t.plausibility)),
    Entry("settled", lambda t: SpecialCaseStage()),
    # Code a passing test ran that the edit deletes with nothing in its place (the baseline's coverage).
    Entry("settled", lambda t: DeletedBehaviourStage()),
    Entry("settled", lambda t: ApiStage(t.api)),
    # With the gate beside the loop: the passing tests that ran a changed line, before the state is taken.
    Entry("probe", lambda t: ProbeStage(t.tests, t.gate)),
    Entry("gate", lambda t: GateStage(t.gate)),
    Entry("gate-checks", lambda t: AllChecksStage(t.checks)),
)

# Each step's order and what it does besides running its stages.
STEPS: dict[str, Step] = {
    # (the tests step's choice of tests made while ruff lints)
    "static": Step((), ahead=select_ahead),
    "targeted": Step((), must_improve="no improvement on the targeted checks"),
    # (again: what remains is counted anew there, by `ruff check` where the static step took the
    # resident server's word, so no improvement rests on the server's count alone)
    "settled": Step((), before=put_back, must_improve="no improvement once settled"),
    "probe": Step(()),
    "gate": Step(()),
    # (what the gate's tests wrote is gone before the checks run)
    "gate-checks": Step((), before=put_back, must_improve="no improvement on the full suite", blame="gate"),
}
GATE = ("gate", "gate-checks")


@dataclass(frozen=True)
class Plan:
    """The steps for one copy's validators: `static` (what the repair re-runs), `sequence` (what
    `verify` runs), `detection` (what a regressing candidate meets before the gate: what `ralph
    bench verify` times) and `gate` (the last two steps, which the background gate runs)."""

    static: Step
    sequence: tuple[Step, ...]
    detection: tuple[Step, ...]
    gate: tuple[Step, ...]

    @classmethod
    def build(cls, tools: Tools, background: bool, registry: Sequence[Entry] = STAGES) -> Plan:
        check(registry)
        steps = {
            name: replace(step, stages=tuple(e.make(tools) for e in registry if e.step == name))
            for name, step in STEPS.items()
        }
        static = steps["static"]
        steps["static"] = replace(static, repair=SafeFixes(static))
        sequence = tuple(s for name, s in steps.items() if not (background and name in GATE))
        return cls(static, sequence, _detection(tools), tuple(steps[name] for name in GATE))

    @staticmethod
    def gate_for(tools: Tools, registry: Sequence[Entry] = STAGES) -> tuple[Step, ...]:
        """The gate's steps on another copy's test runner and checks (the background gate's): a stage
        of the gate steps uses `tools.gate` and `tools.checks` alone, the copy's own."""
        return tuple(
            replace(STEPS[name], stages=tuple(e.make(tools) for e in registry if e.step == name))
            for name in GATE
        )


def check(registry: Sequence[Entry]) -> None:
    """Every entry names a step of the plan (checked before any validator starts)."""
    if unknown := {e.step for e in registry} - set(STEPS):
        raise ValueError(f"stages registered for no step: {', '.join(sorted(unknown))}")


def _detection(tools: Tools) -> tuple[Step, ...]:
    """Syntax and ruff, the selected tests in the warm runner, the type checker. A regressing
    mutant is rejected, never formatted: the detection has no format stage."""
    checks = (SyntaxStage(tools.syntax), LintStage(tools.ruff))
    return (
        Step(checks, ahead=select_ahead),
        Step((SelectedTestsStage(tools.tests),)),
        Step((TypesStage(settled=True),)),
    )
