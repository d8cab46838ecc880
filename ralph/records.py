"""What a run reports: its budget and result, the trace's records of its iterations and candidates,
what a router may know of an iteration, and the commit message of an accepted edit."""

from __future__ import annotations

from dataclasses import dataclass, field

from ralph.domain.candidate import Candidate
from ralph.domain.events import CandidateRecord, IterationRecord
from ralph.domain.protocols import IterationSummary, RouteDecision
from ralph.domain.score import Observation, Score
from ralph.domain.verdict import VerifyReport


@dataclass(frozen=True)
class Budget:
    max_iterations: int = 20
    max_seconds: float | None = None
    max_cost: float | None = None

    def exceeded(self, iterations: int, elapsed_s: float, cost_usd: float) -> str | None:
        """Which limit the run has reached (the outcome it stops with), or None."""
        if iterations >= self.max_iterations:
            return "max_iterations"
        if self.max_seconds is not None and elapsed_s >= self.max_seconds:
            return "max_seconds"
        if self.max_cost is not None and cost_usd >= self.max_cost:
            return "max_cost"
        return None


@dataclass
class RunResult:
    outcome: str  # goal, stalled, max_iterations, max_seconds, max_cost, interrupted
    iterations: int = 0
    accepted: int = 0
    remaining: int = 0
    remaining_at_start: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    history: list[IterationSummary] = field(default_factory=list)
    gate_wait_s: float = 0.0  # the loop waiting for background gates (verification, on its path)
    unpriced_tokens: int = 0  # tokens of models whose price is unknown: their cost is not in cost_usd
    final: Score | None = None  # what still stands between the last state and the goal
    state: Observation | None = None  # the last accepted state, as observed
    # States it stood on that are not on the branch: kept though their gate found regressions that
    # no later state fixed (--on-gate-failure todo); the branch holds the last state whose gate passed.
    uncommitted: tuple[int, ...] = ()

    @property
    def exit_code(self) -> int:
        return {"goal": 0, "interrupted": 130}.get(self.outcome, 1)


def iteration_record(
    result: RunResult,
    decision: RouteDecision,
    before: int,
    verdicts: list[CandidateRecord],
    times: tuple[
        float, float, float
    ],  # the iteration's wall ms, its drafting ms, seconds since the loop's start
    proposed: int,
    commit: str | None,
    cost: float,
) -> IterationRecord:
    wall_ms, draft_ms, elapsed_s = times
    verify_ms = sum(v["verify_ms"] for v in verdicts)
    return {
        "i": result.iterations,
        "drafter": decision.drafter,
        "route": {"drafter": decision.drafter, "n": decision.n, "reason": decision.reason},
        "remaining_before": before,
        "remaining_after": result.remaining,
        "accepted": result.remaining < before,
        "draft_ms": round(draft_ms, 1),
        "verify_ms": round(verify_ms, 1),
        "overhead_ms": round(max(0.0, wall_ms - draft_ms - verify_ms), 1),
        "elapsed_s": round(elapsed_s, 3),  # since the loop started
        "cost_usd": cost,
        "candidates": verdicts,
        "proposed": proposed,
        "commit": commit,
    }


def summary(record: IterationRecord) -> IterationSummary:
    return IterationSummary(
        i=record["i"],
        drafter=record["drafter"],
        remaining_before=record["remaining_before"],
        remaining_after=record["remaining_after"],
        accepted=record["accepted"],
        candidates=len(record["candidates"]),
        exhausted=record["proposed"] == 0,
        draft_ms=record["draft_ms"],
        verify_ms=record["verify_ms"],
        cost_usd=record["cost_usd"],
        kinds=tuple(
            str(c["meta"]["operator"]) for c in record["candidates"] if "operator" in c.get("meta", {})
        ),
    )


def candidate_record(candidate: Candidate, report: VerifyReport) -> CandidateRecord:
    record: CandidateRecord = {
        "drafter": candidate.drafter,
        "description": candidate.description,
        "fingerprint": candidate.fingerprint,
        "diff": candidate.diff,
        "draft_ms": round(candidate.draft_ms, 1),
        "tokens": candidate.tokens,
        "cost_usd": candidate.cost_usd,
        **report.to_json(),
    }
    if candidate.meta:  # how it came to be (a model's raw reply, finish reason, latency), so that a
        record["meta"] = _plain(candidate.meta)  # reply that gave no edit can be read afterwards
    return record


def _plain(meta: dict[str, object]) -> dict[str, object]:
    return {str(k): v for k, v in meta.items() if isinstance(v, str | int | float | bool | type(None))}


def commit_message(candidate: Candidate, before: Score, report: VerifyReport) -> str:
    """Names the drafter, the checks the commit fixed, and whether the verifier amended the edit."""
    assert report.score is not None
    after = report.score
    fixed = [*sorted(set(before.failing_targets) - set(after.failing_targets))]
    fixed += sorted(set(before.failing_checks) - set(after.failing_checks))
    fixed += sorted(set(before.new_diagnostics) - set(after.new_diagnostics))
    lines = [f"ralph: {candidate.description}", "", f"Drafter: {candidate.drafter}"]
    lines.append(f"Remaining error: {before.remaining} -> {after.remaining}")
    lines += ["Fixed:", *(f"- {item}" for item in fixed)] if fixed else []
    if report.changes is not None:
        lines.append("Amended: ruff's safe fixes applied to the edited files")
    return "\n".join(lines) + "\n"
