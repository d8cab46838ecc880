"""The verdict on one candidate: accepted or not, why, and every stage that ran."""

from __future__ import annotations

from dataclasses import dataclass, field

from ralph.domain.candidate import FileChange, unified_diff
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
        return record
