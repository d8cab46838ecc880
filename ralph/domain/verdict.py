"""The verdict on one candidate: accepted or not, why, and every stage that ran; and what the
background gate is given (a provisionally accepted state) and returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from ralph.domain.candidate import Candidate, FileChange, unified_diff
from ralph.domain.events import VerdictRecord
from ralph.domain.results import StageResult
from ralph.domain.score import Observation, Score


@dataclass
class VerifyReport:
    """The verdict on one candidate, with every stage that ran."""

    accepted: bool
    reason: str
    stages: list[StageResult] = field(default_factory=list)
    observation: Observation | None = None
    score: Score | None = None
    duration_ms: float = 0.0
    failed_stage: str | None = None
    # The edit as verified when the verifier amended it (ruff's safe fixes applied): what to commit.
    changes: tuple[FileChange, ...] | None = None
    # False: accepted on its targeted stages only, the full gate still to run in the background.
    gated: bool = True

    @property
    def tests_run(self) -> int:
        """Test executions this verdict cost: how many outcomes its test stages reported (a gate's
        "disappeared" entries are none)."""
        return sum(
            sum(t.message != "disappeared from the suite" for t in s.tests)
            for s in self.stages
            if s.stage in ("tests", "gate") and not s.skipped
        )

    def to_json(self) -> VerdictRecord:
        record: VerdictRecord = {
            "verdict": "accepted" if self.accepted else "rejected",
            "reason": self.reason,
            "failed_stage": self.failed_stage,
            "verify_ms": round(self.duration_ms, 1),
            "score": self.score.to_json() if self.score else None,
            "stages": [s.to_json() for s in self.stages],
            "tests_run": self.tests_run,
        }
        if self.changes is not None:
            record["amended_diff"] = unified_diff(self.changes)
        if not self.gated:
            record["gate"] = "background"
        return record


@dataclass(frozen=True)
class GateJob:
    """A state accepted on its targeted stages whose full gate is still to run: `state` was made
    by applying `changes` (the candidate's edit as accepted) to state `parent`, and `stages` are
    what the synchronous stages observed of it."""

    state: int
    parent: int
    candidate: Candidate
    changes: tuple[FileChange, ...]
    stages: tuple[StageResult, ...]


@dataclass(frozen=True)
class GateOutcome:
    """What the background gate made of a state: "passed", "rejected" (the report says why), or
    "discarded" (it was built on a state whose gate did not pass, or the gate was cancelled).
    `kept`: rejected, yet kept as the base of the next state (`--on-gate-failure todo`): the tests it
    broke are the loop's to fix (they count in its remaining error, never zero), and its edit is
    committed with the next state whose gate passes."""

    state: int
    verdict: str
    report: VerifyReport | None = None
    duration_ms: float = 0.0
    kept: bool = False
