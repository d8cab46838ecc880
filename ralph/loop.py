"""The loop: from the verified baseline, repeat {route, draft, verify candidates, decide, trace}.

It depends on the Protocols of ralph.domain and its own parts (lanes, provisional states, memory,
drafting, records), which depend on the domain only; ralph/session.py wires the concrete classes."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ralph.domain.candidate import Candidate
from ralph.domain.errors import RalphError
from ralph.domain.events import CandidateRecord
from ralph.domain.protocols import (
    Branch,
    DraftContext,
    Drafter,
    Gate,
    RouteDecision,
    Router,
    Trace,
    Verification,
    View,
    Workspace,
)
from ralph.domain.score import Observation
from ralph.domain.verdict import VerifyReport
from ralph.drafting import Batch, drafts
from ralph.lanes import Cancelled, Clock, Lane, Lanes
from ralph.memory import DOWN_AFTER, Memory
from ralph.provisional import Gatekeeper, States
from ralph.records import Budget, RunResult, candidate_record, commit_message, iteration_record, summary

__all__ = ["Budget", "Lane", "Loop", "RunResult"]


@dataclass
class Loop:
    task: str
    workspace: Workspace
    verifier: Verification
    drafters: dict[str, Drafter]
    router: Router
    branch: Branch
    trace: Trace
    view: View
    budget: Budget
    protected: tuple[str, ...]
    gate: Gate | None = None  # runs the full gate beside the loop; None: it is part of `verify`
    lanes: tuple[Lane, ...] = ()  # more copies to verify candidates on side by side (--jobs)
    fresh_start_after: int = 0  # rejected iterations in a row on one state before drafts start fresh
    states: States = field(init=False)
    keeper: Gatekeeper | None = field(init=False, default=None)

    def run(
        self, state: Observation, done: tuple[int, float] = (0, 0.0), rejected: frozenset[str] = frozenset()
    ) -> RunResult:
        """Drive `state` (the verified baseline) towards zero remaining error; `done` is (iterations,
        cost) already spent by the run this one resumes, which count against the budgets, and
        `rejected` the fingerprints it rejected, which are never verified again."""
        start = time.monotonic()
        remaining = self.verifier.score(state).remaining
        result = RunResult(
            "goal", done[0], cost_usd=done[1], remaining=remaining, remaining_at_start=remaining
        )
        memory = Memory.resuming(rejected)
        self.states = States(gated=state)
        if self.gate is not None:
            lanes, score = self._lanes(), self.verifier.score
            parts = (self.branch, self.trace, self.view, score, self.workspace.encode)
            self.keeper = Gatekeeper(self.gate, self.states, lanes, *parts)
        try:
            while True:
                # What the background gate decided so far. All of it at zero remaining error (the
                # goal is a state whose gate passed), and when a provisional state's error is not
                # known (tests its targeted stage left unrun): no candidate is judged against it.
                wait = result.remaining <= 0 or self.states.unconfirmed
                state = self._settle(state, result, memory, start, wait)
                if result.remaining <= 0 and not self.states.provisional:
                    break
                if stop := self.budget.exceeded(result.iterations, time.monotonic() - start, result.cost_usd):
                    result.outcome = stop
                    break
                decision = self.router.route(result.history, list(self.drafters))  # route
                if decision is None:
                    result.outcome = "stalled"
                    break
                state = self._iteration(decision, state, result, memory, start)
            state = self._last_gates(state, result, memory, start)
        except KeyboardInterrupt:
            result.outcome = "interrupted"
            state = self._last_gates(state, result, memory, start)
        result.wall_s = time.monotonic() - start
        result.final, result.state = self.verifier.score(state), state
        result.uncommitted = tuple(s.state for s in self.states.kept)
        result.accepted -= len(result.uncommitted)  # (never on the branch: as if undone)
        return result

    def _iteration(
        self, decision: RouteDecision, state: Observation, result: RunResult, memory: Memory, start: float
    ) -> Observation:
        """Draft, verify the candidates until one is accepted, trace, then move the branch: the
        state the loop goes on from."""
        t0 = time.perf_counter()
        before, draft_ms, commit, winner = result.remaining, 0.0, None, None
        verdicts: list[CandidateRecord] = []
        drafter, on_state = self.drafters[decision.drafter], self.states.current
        batch = Batch(decision.n, drafter.remote)
        proposed = drafts(drafter, self._context(state, memory), batch, memory)  # draft
        live = self._live(f"#{result.iterations + 1} {decision.drafter}", start, batch)
        clock, width = Clock(), 1 if batch.remote else batch.asked
        with contextlib.closing(self._lanes().verdicts(proposed, state, live, clock, width)) as judged:
            for candidate, report, waited_ms, lane in judged:  # verify
                draft_ms += waited_ms
                verdicts.append(candidate_record(candidate, report))
                if report.accepted and report.observation is not None and report.score is not None:
                    commit = self._accept(candidate, report, state, result.iterations + 1)  # decide
                    state, result.remaining = report.observation, report.score.remaining
                    result.accepted += 1
                    winner = (lane, tuple(report.changes or candidate.changes))
                    break
                memory.rejections.reject(candidate, report, self.states.current)
        if winner is not None:  # every other lane takes the accepted edit in too
            self._lanes().adopt(*winner)
        memory.rejections.end_round(
            self.states.stand, winner is None and bool(verdicts), self.fresh_start_after
        )
        if why := memory.health.end_batch(drafter.name):
            self.view.notice(
                f"{drafter.name}: every draft failed {DOWN_AFTER} iterations in a row; not asked again: {why}"
            )
        result.iterations += 1
        spent = memory.costs.spent()  # every draft's, verified or not (a duplicate cost tokens too)
        result.cost_usd += spent
        result.unpriced_tokens = memory.costs.unpriced_tokens
        times = ((time.perf_counter() - t0) * 1000, draft_ms, time.monotonic() - start)
        tip = commit or self.branch.tip
        record = iteration_record(
            result, decision, before, verdicts, times, batch.drafted, tip, spent
        )  # trace
        if clock.parallel:  # lanes verified side by side: the iteration's own verification time
            record["verify_ms"] = round(clock.ms, 1)
            record["overhead_ms"] = round(max(0.0, times[0] - draft_ms - clock.ms), 1)
            record["cancelled"] = clock.cancelled
        if self.gate is not None:
            record["on_state"] = on_state
        if commit is None and self.states.provisional and self.states.provisional[-1].state == record["i"]:
            record["state"] = self.states.current
        self.trace.write("iteration", **record)  # first the trace, then the branch
        if commit is not None:
            self.branch.advance(commit)
        self.view.iteration(record)
        result.history.append(summary(record))
        return state

    def _accept(self, candidate: Candidate, report: VerifyReport, state: Observation, i: int) -> str | None:
        """The accepted candidate's commit, prepared; or, when its gate runs in the background, None:
        the state is provisional, its gate submitted, and the commit waits for the gate to pass."""
        message = commit_message(candidate, self.verifier.score(state), report)
        if report.gated:
            self.states.move_to(i)
            return self.branch.prepare(
                tuple(report.changes or candidate.changes), message, self.workspace.encode
            )
        if self.keeper is None:  # a verifier wired to gate beside a loop that has no gate: never commit
            raise RalphError("internal error: a verdict whose gate is to run beside the loop, and no gate")
        self.keeper.submit(i, candidate, report, message)
        return None

    def _settle(
        self, state: Observation, result: RunResult, memory: Memory, start: float, wait: bool
    ) -> Observation:
        """The background gate's verdicts so far (with `wait`, all of them, within the time budget)."""
        if self.keeper is None:
            return state
        return self.keeper.settle(state, result, memory, start, wait, self._left(start))

    def _last_gates(self, state: Observation, result: RunResult, memory: Memory, start: float) -> Observation:
        if self.keeper is None:
            return state
        return self.keeper.last(state, result, memory, start, self._left(start))

    def _left(self, start: float) -> float | None:
        """The seconds left of the time budget (None: no limit)."""
        if self.budget.max_seconds is None:
            return None
        return max(0.0, self.budget.max_seconds - (time.monotonic() - start))

    def _live(self, head: str, start: float, batch: Batch) -> Callable[..., Callable[[str], None]]:
        """The live line while a candidate is verified: which one of how many, the run's time, the
        step. On a lane (`stop` given), cancelled at its next step once `stop` is set, and shown only
        for the first of its batch (`span` None for the others)."""

        def line(
            span: tuple[int, int] | None, candidate: Candidate, stop: threading.Event | None
        ) -> Callable[[str], None]:
            def show(stage: str) -> None:
                if stop is not None and stop.is_set():
                    raise Cancelled
                if span is None:
                    return
                first, last = span
                which = (
                    f"{first}/{max(batch.drafted, first)}"
                    if stop is None
                    else f"{first}-{last}/{batch.drafted}"
                )
                gating = f" · {self.gate.status}" if self.gate is not None and self.gate.status else ""
                elapsed = time.monotonic() - start
                self.view.progress(
                    f"{head} {which} · {elapsed:.0f}s · {candidate.description} · {stage}{gating}"
                )

            return show

        return line

    def _lanes(self) -> Lanes:
        return Lanes((Lane(self.workspace, self.verifier), *self.lanes))

    def _context(self, state: Observation, memory: Memory) -> DraftContext:
        rejections = memory.rejections
        return DraftContext(
            task=self.task,
            project=self.workspace.accepted_project,
            state_id=self.states.stand,
            **vars(self.verifier.evidence(state)),
            rejected=frozenset(rejections.rejected),
            attempts=tuple(rejections.attempts),
            best_rejected=rejections.best,
            protected=self.protected,
        )
