"""The loop: baseline verify, then repeat {route, draft, verify candidates, decide, trace}, then finish."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Protocol

from ralph.branch import RalphBranch
from ralph.candidate import Candidate
from ralph.localize import suspicious_lines
from ralph.protocols import DraftContext, Drafter, IterationSummary, RouteDecision, Router
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

    def run(
        self, state: Observation, done: tuple[int, float] = (0, 0.0), rejected: frozenset[str] = frozenset()
    ) -> RunResult:
        """Drive `state` (the verified baseline) towards zero remaining error; `done` is (iterations,
        cost) already spent by the run this one resumes, which count against the budgets, and
        `rejected` the fingerprints it rejected, which are never verified again."""
        start = time.monotonic()
        result = RunResult(
            "goal", iterations=done[0], cost_usd=done[1], remaining=self.verifier.score(state).remaining
        )
        result.remaining_at_start = result.remaining
        memory = Memory(rejected=set(rejected))
        try:
            while result.remaining > 0:
                if stop := self._out_of_budget(result, time.monotonic() - start):
                    result.outcome = stop
                    break
                decision = self.router.route(result.history, list(self.drafters))  # route
                if decision is None:
                    result.outcome = "stalled"
                    break
                t0 = time.perf_counter()
                context = self._context(state, result.accepted, memory)
                before, verdicts, draft_ms, pending = result.remaining, [], 0.0, None
                for candidate, waited_ms in self._drafts(
                    decision.drafter, context, decision.n, memory
                ):  # draft
                    draft_ms += waited_ms
                    self.view.progress(
                        f"#{result.iterations + 1} {decision.drafter} · {candidate.description}"
                    )
                    report = self._verify(candidate, state)  # verify
                    verdicts.append(_candidate_record(candidate, report))
                    result.cost_usd += candidate.cost_usd or 0.0
                    if (
                        report.accepted and report.observation is not None and report.score is not None
                    ):  # decide
                        message = _commit_message(candidate, self.verifier.score(state), report.score)
                        if report.changes is not None:
                            message += "Amended: ruff's safe fixes applied to the edited files\n"
                        state, result.remaining = report.observation, report.score.remaining
                        result.accepted += 1
                        pending = self.branch.prepare(
                            report.changes or candidate.changes, message, self.workspace.encode
                        )
                        break
                    memory.reject(candidate, report)
                result.iterations += 1
                record = self._record(result, decision, before, verdicts, t0, draft_ms, start)  # trace
                record["proposed"] = memory.drafted  # duplicates and known failures were not verified
                if pending is not None:
                    record["commit"] = pending
                self.trace.write("iteration", **record)  # first the trace, then the branch
                if pending is not None:
                    self.branch.advance(pending)
                self.view.iteration(record)
                result.history.append(_summary(record))
        except KeyboardInterrupt:
            result.outcome = "interrupted"
        result.wall_s = time.monotonic() - start
        return result

    def _drafts(
        self, name: str, context: DraftContext, n: int, memory: Memory
    ) -> Iterator[tuple[Candidate, float]]:
        """The drafter's candidates, each with the drafting time it cost, new ones only, smallest
        first. A remote drafter (`remote = True`) is asked n times at once, and each candidate is
        verified as soon as it arrives while the others are still being written."""
        drafter = self.drafters[name]
        memory.drafted = 0
        start = time.perf_counter()
        if getattr(drafter, "remote", False) and n > 1:
            with ThreadPoolExecutor(max_workers=n) as pool:
                futures = [pool.submit(drafter.draft, context, 1) for _ in range(n)]
                for future in as_completed(futures):
                    waited, start = (time.perf_counter() - start) * 1000, time.perf_counter()
                    batch = future.result()
                    memory.drafted += len(batch)
                    for candidate in batch:
                        if memory.is_new(candidate):
                            yield candidate, waited
                            waited, start = 0.0, time.perf_counter()
            return
        batch = drafter.draft(context, n)
        memory.drafted = len(batch)
        waited = (time.perf_counter() - start) * 1000
        for candidate in sorted(batch, key=_cost_estimate):
            if memory.is_new(candidate):
                yield candidate, waited
                waited = 0.0

    def _record(
        self,
        result: RunResult,
        decision: RouteDecision,
        before: int,
        verdicts: list[dict[str, Any]],
        t0: float,
        draft_ms: float,
        start: float,
    ) -> dict[str, Any]:
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
            "overhead_ms": round(max(0.0, (time.perf_counter() - t0) * 1000 - draft_ms - verify_ms), 1),
            "elapsed_s": round(time.monotonic() - start, 3),  # since the loop started
            "cost_usd": sum(v["cost_usd"] or 0.0 for v in verdicts),
            "candidates": verdicts,
            "commit": self.branch.tip,
        }

    def _out_of_budget(self, result: RunResult, elapsed: float) -> str | None:
        if result.iterations >= self.budget.max_iterations:
            return "max_iterations"
        if self.budget.max_seconds is not None and elapsed >= self.budget.max_seconds:
            return "max_seconds"
        if self.budget.max_cost is not None and result.cost_usd >= self.budget.max_cost:
            return "max_cost"
        return None

    def _context(self, state: Observation, state_id: int, memory: Memory) -> DraftContext:
        failing = tuple(state.tests[t] for t in state.failing_tests())
        suspicious = suspicious_lines(failing, self.verifier.coverage, state.passing_tests(), self.protected)
        if self.verifier.only is not None:  # edits are limited to some files (a pre-commit hook's)
            suspicious = [s for s in suspicious if s[0] in self.verifier.only]
        return DraftContext(
            task=self.task,
            project=self.workspace.project,
            state_id=state_id,
            failing_tests=failing,
            diagnostics=tuple(
                d
                for ds in state.diagnostics.values()
                for d in ds
                if self.verifier.only is None or d.path in self.verifier.only
            ),
            failing_checks=tuple(c for c, r in state.checks.items() if not r.passed),
            suspicious=tuple(suspicious),
            rejected=frozenset(memory.rejected),
            attempts=tuple(memory.attempts),
            best_rejected=memory.best,
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
            report = self.verifier.verify(candidate, state, reset=self.workspace.restore)
        finally:
            # Back to exactly the accepted state (plus the edit, when accepted): files the
            # candidate's tests wrote, changed or replaced are undone before anything else runs.
            if report.accepted:
                self.workspace.accept(report.changes or candidate.changes)
            else:
                self.workspace.rollback(candidate.changes)
            self.verifier.restored(self.workspace.take_foreign())
        return report


@dataclass
class Memory:
    """What this run already tried: nothing is verified twice, models see what failed and why."""

    rejected: set[str] = field(default_factory=set)
    attempts: list[tuple[str, str]] = field(default_factory=list)  # (diff, why), latest last
    best: tuple[str, str] | None = None  # the rejected edit that came closest, for a repair
    best_remaining: int | None = None
    proposed: set[str] = field(default_factory=set)
    drafted: int = 0  # what the drafter returned this iteration, new or not

    def is_new(self, candidate: Candidate) -> bool:
        """False for an edit already rejected, or already proposed in this iteration's batch."""
        fingerprint = candidate.fingerprint
        if candidate.changes and (fingerprint in self.rejected or fingerprint in self.proposed):
            return False
        self.proposed.add(fingerprint)
        return True

    def reject(self, candidate: Candidate, report: VerifyReport) -> None:
        self.rejected.add(candidate.fingerprint)
        self.proposed.discard(candidate.fingerprint)
        entry = (candidate.diff or candidate.description, report.reason)
        self.attempts = [*self.attempts[-9:], entry]
        remaining = report.score.remaining if report.score is not None and candidate.changes else None
        if remaining is not None and (self.best_remaining is None or remaining < self.best_remaining):
            self.best, self.best_remaining = entry, remaining


def _cost_estimate(candidate: Candidate) -> int:
    """Cheapest to verify first: a parse error costs nothing, then the smallest edits."""
    return (
        0
        if candidate.error
        else 1 + sum(len(c.after or "") - len(c.before or "") != 0 for c in candidate.changes)
    )


def _summary(record: dict[str, Any]) -> IterationSummary:
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
    )


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
