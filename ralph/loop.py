"""The loop: baseline verify, then repeat {route, draft, verify candidates, decide, trace}, then finish."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ralph.branch import RalphBranch
from ralph.candidate import Candidate
from ralph.localize import suspicious_lines
from ralph.protocols import DraftContext, Drafter, IterationSummary, Router
from ralph.score import Observation, Score
from ralph.trace import TraceWriter
from sandboxes.workspace import UnsafePath, Workspace
from validators.pipeline import Verifier, VerifyReport


@dataclass(frozen=True)
class Budget:
    max_iterations: int = 20
    max_seconds: float | None = None
    max_cost: float | None = None


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

    @property
    def exit_code(self) -> int:
        return {"goal": 0, "interrupted": 130}.get(self.outcome, 1)


class View(Protocol):
    """Whoever watches the run (the terminal, or nobody)."""

    def iteration(self, record: dict[str, Any]) -> None: ...

    def notice(self, text: str) -> None: ...

    def progress(self, text: str) -> None: ...


@dataclass
class Loop:
    task: str
    workspace: Workspace
    verifier: Verifier
    drafters: dict[str, Drafter]
    router: Router
    branch: RalphBranch
    trace: TraceWriter
    view: View
    budget: Budget
    protected: tuple[str, ...]

    def run(self, state: Observation) -> RunResult:
        """Drive `state` (the verified baseline) towards zero remaining error."""
        start = time.monotonic()
        result = RunResult("stalled", remaining=self.verifier.score(state).remaining)
        result.remaining_at_start = result.remaining
        rejected: set[str] = set()
        attempts: list[tuple[str, str]] = []
        try:
            while result.remaining > 0:
                if stop := self._out_of_budget(result, time.monotonic() - start):
                    result.outcome = stop
                    break
                decision = self.router.route(result.history, list(self.drafters))
                if decision is None:
                    result.outcome = "stalled"
                    break
                t0 = time.perf_counter()
                context = self._context(state, result.accepted, rejected, attempts)
                candidates = self.drafters[decision.drafter].draft(context, decision.n)
                draft_ms = (time.perf_counter() - t0) * 1000
                before, verdicts = result.remaining, []
                for k, candidate in enumerate(candidates, 1):
                    self.view.progress(
                        f"#{result.iterations + 1} {decision.drafter} · remaining {before} · "
                        f"verifying {k}/{len(candidates)}: {candidate.description}"
                    )
                    report = self._verify(candidate, state)
                    verdicts.append(_candidate_record(candidate, report))
                    result.cost_usd += candidate.cost_usd or 0.0
                    if not report.accepted:
                        rejected.add(candidate.fingerprint)
                        attempts[:] = [
                            *attempts[-9:],
                            (candidate.diff or candidate.description, report.reason),
                        ]
                        continue
                    assert report.observation is not None and report.score is not None
                    message = _commit_message(candidate, self.verifier.score(state), report.score)
                    state, result.remaining = report.observation, report.score.remaining
                    result.accepted += 1
                    self.branch.commit(candidate.changes, message)
                    break
                result.iterations += 1
                verify_ms = sum(v["verify_ms"] for v in verdicts)
                record = {
                    "i": result.iterations,
                    "drafter": decision.drafter,
                    "route": {"drafter": decision.drafter, "n": decision.n, "reason": decision.reason},
                    "remaining_before": before,
                    "remaining_after": result.remaining,
                    "accepted": result.remaining < before,
                    "draft_ms": round(draft_ms, 1),
                    "verify_ms": round(verify_ms, 1),
                    "overhead_ms": round((time.perf_counter() - t0) * 1000 - draft_ms - verify_ms, 1),
                    "elapsed_s": round(time.monotonic() - start, 3),  # since the loop started
                    "candidates": verdicts,
                    "commit": self.branch.tip,
                }
                self.trace.write("iteration", **record)
                self.view.iteration(record)
                result.history.append(
                    IterationSummary(
                        result.iterations, decision.drafter, before, result.remaining,
                        result.remaining < before, len(candidates), not candidates, draft_ms, verify_ms,
                        sum(c.cost_usd or 0.0 for c in candidates),
                    )
                )  # fmt: skip
            else:
                result.outcome = "goal"
        except KeyboardInterrupt:
            result.outcome = "interrupted"
        result.wall_s = time.monotonic() - start
        return result

    def _out_of_budget(self, result: RunResult, elapsed: float) -> str | None:
        if result.iterations >= self.budget.max_iterations:
            return "max_iterations"
        if self.budget.max_seconds is not None and elapsed >= self.budget.max_seconds:
            return "max_seconds"
        if self.budget.max_cost is not None and result.cost_usd >= self.budget.max_cost:
            return "max_cost"
        return None

    def _context(
        self, state: Observation, state_id: int, rejected: set[str], attempts: list[tuple[str, str]]
    ) -> DraftContext:
        failing = tuple(state.tests[t] for t in state.failing_tests())
        suspicious = suspicious_lines(failing, self.verifier.coverage, state.passing_tests(), self.protected)
        return DraftContext(
            task=self.task,
            project=self.workspace.project,
            state_id=state_id,
            failing_tests=failing,
            diagnostics=tuple(d for ds in state.diagnostics.values() for d in ds),
            failing_checks=tuple(c for c, r in state.checks.items() if not r.passed),
            suspicious=tuple(suspicious),
            rejected=frozenset(rejected),
            attempts=tuple(attempts),
            protected=self.protected,
        )

    def _verify(self, candidate: Candidate, state: Observation) -> VerifyReport:
        """Apply, verify, and roll back unless accepted. The workspace always ends in a known state."""
        if candidate.error:
            return VerifyReport(False, candidate.error, failed_stage="parse")
        if not candidate.changes:
            return VerifyReport(False, "the edit changes nothing", failed_stage="parse")
        try:
            if any(self.workspace.read(c.path) != c.before for c in candidate.changes):
                return VerifyReport(
                    False, "stale edit: a file changed since it was drafted", failed_stage="apply"
                )
            self.workspace.apply(candidate.changes)
        except (UnsafePath, UnicodeDecodeError) as exc:
            return VerifyReport(False, str(exc), failed_stage="apply")
        report = VerifyReport(False, "interrupted", failed_stage="interrupted")
        try:
            report = self.verifier.verify(candidate, state)
        finally:
            if not report.accepted:
                self.workspace.revert(candidate.changes)
        return report


def _candidate_record(candidate: Candidate, report: VerifyReport) -> dict[str, Any]:
    return {
        "drafter": candidate.drafter,
        "description": candidate.description,
        "fingerprint": candidate.fingerprint,
        "diff": candidate.diff,
        "draft_ms": round(candidate.draft_ms, 1),
        "tokens": candidate.tokens,
        "cost_usd": candidate.cost_usd,
        **report.to_json(),
    }


def _commit_message(candidate: Candidate, before: Score, after: Score) -> str:
    """Names the drafter and the checks the commit fixed."""
    fixed = [*sorted(set(before.failing_targets) - set(after.failing_targets))]
    fixed += sorted(set(before.failing_checks) - set(after.failing_checks))
    fixed += sorted(set(before.new_diagnostics) - set(after.new_diagnostics))
    lines = [f"ralph: {candidate.description}", "", f"Drafter: {candidate.drafter}"]
    lines.append(f"Remaining error: {before.remaining} -> {after.remaining}")
    lines += ["Fixed:", *(f"- {item}" for item in fixed)] if fixed else []
    return "\n".join(lines) + "\n"
