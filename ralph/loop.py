"""The loop: from the verified baseline, repeat {route, draft, verify candidates, decide, trace}.

It depends on the Protocols of ralph.domain only; ralph/session.py wires the concrete classes."""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.errors import RalphError, UnsafePath
from ralph.domain.events import CandidateRecord, GateRecord, IterationRecord
from ralph.domain.protocols import (
    Branch,
    DraftContext,
    Drafter,
    Gate,
    IterationSummary,
    RouteDecision,
    Router,
    Trace,
    Verification,
    View,
    Workspace,
)
from ralph.domain.score import Observation, Score
from ralph.domain.verdict import GateJob, GateOutcome, VerifyReport

_DOWN_AFTER = 3  # failed drafts in a row after which a drafter is not asked again


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
    gate_wait_s: float = 0.0  # the loop waiting for background gates (verification, on its path)
    unpriced_tokens: int = 0  # tokens of models whose price is unknown: their cost is not in cost_usd
    final: Score | None = None  # what still stands between the last state and the goal
    state: Observation | None = None  # the last accepted state, as observed

    @property
    def exit_code(self) -> int:
        return {"goal": 0, "interrupted": 130}.get(self.outcome, 1)


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
    states: States = field(init=False)

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
        memory = Memory(rejected=set(rejected), rejected_on={0: set(rejected)})
        self.states = States(gated=state)
        try:
            while True:
                # What the background gate decided so far. All of it at zero remaining error (the
                # goal is a state whose gate passed), and when a provisional state's error is not
                # known (tests its targeted stage left unrun): no candidate is judged against it.
                wait = result.remaining <= 0 or self.states.unconfirmed
                state = self._settle(state, result, memory, start, wait=wait)
                if result.remaining <= 0 and not self.states.provisional:
                    break
                if stop := self._out_of_budget(result, time.monotonic() - start):
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
        return result

    def _iteration(
        self, decision: RouteDecision, state: Observation, result: RunResult, memory: Memory, start: float
    ) -> Observation:
        """Draft, verify the candidates until one is accepted, trace, then move the branch: the
        state the loop goes on from."""
        t0 = time.perf_counter()
        before, draft_ms, commit = result.remaining, 0.0, None
        verdicts: list[CandidateRecord] = []
        context = self._context(state, memory)
        on_state = self.states.current
        memory.asked, memory.remote = decision.n, bool(getattr(self.drafters[decision.drafter], "remote", 0))
        drafts = self._drafts(decision.drafter, context, decision.n, memory)  # draft
        head = f"#{result.iterations + 1} {decision.drafter}"
        clock = Clock()
        with contextlib.closing(self._verdicts(drafts, state, (head, start), memory, clock)) as judged:
            for candidate, report, waited_ms, lane in judged:  # verify
                draft_ms += waited_ms
                verdicts.append(_candidate_record(candidate, report))
                if report.accepted and report.observation is not None and report.score is not None:
                    commit = self._accept(candidate, report, state, result.iterations + 1)  # decide
                    state, result.remaining = report.observation, report.score.remaining
                    result.accepted += 1
                    winner = (lane, tuple(report.changes or candidate.changes))
                    break
                memory.reject(candidate, report, self.states.current)
            else:
                winner = None
        if winner is not None:  # every other lane takes the accepted edit in too
            self._adopt(*winner)
        self._down_if_failing(decision.drafter, memory)
        result.iterations += 1
        spent = memory.spent()  # every draft's, verified or not (a duplicate cost tokens too)
        result.cost_usd += spent
        result.unpriced_tokens = memory.unpriced_tokens
        times = (t0, draft_ms, start)
        record = self._record(
            result, decision, before, verdicts, times, memory.drafted, commit, spent
        )  # trace
        if clock.parallel:  # lanes verified side by side: the iteration's own verification time
            record["verify_ms"] = round(clock.ms, 1)
            wall = (time.perf_counter() - t0) * 1000
            record["overhead_ms"] = round(max(0.0, wall - draft_ms - clock.ms), 1)
            record["cancelled"] = clock.cancelled
        if self.gate is not None:
            record["on_state"] = on_state
        if commit is None and self.states.provisional and self.states.provisional[-1].state == record["i"]:
            record["state"] = self.states.current
        self.trace.write("iteration", **record)  # first the trace, then the branch
        if commit is not None:
            self.branch.advance(commit)
        self.view.iteration(record)
        result.history.append(_summary(record))
        return state

    def _accept(self, candidate: Candidate, report: VerifyReport, state: Observation, i: int) -> str | None:
        """The accepted candidate's commit, prepared; or, when its gate runs in the background, None:
        the state is provisional, its gate submitted, and the commit waits for the gate to pass."""
        message = _commit_message(candidate, self.verifier.score(state), report)
        changes = tuple(report.changes or candidate.changes)
        if report.gated:
            self.states.current = i
            self.states.stand += 1
            return self.branch.prepare(changes, message, self.workspace.encode)
        if self.gate is None:  # a verifier wired to gate beside a loop that has no gate: never commit
            raise RalphError("internal error: a verdict whose gate is to run beside the loop, and no gate")
        unconfirmed = any(s.stage == "tests" and s.stopped_early for s in report.stages)
        entry = Provisional(i, self.states.current, candidate, changes, message, unconfirmed)
        self.states.provisional.append(entry)
        self.states.current = entry.state
        self.states.stand += 1
        stages = tuple(report.stages)
        self.gate.submit(GateJob(entry.state, entry.parent, candidate, changes, stages))
        return None

    def _settle(
        self,
        state: Observation,
        result: RunResult,
        memory: Memory,
        start: float,
        wait: bool = False,
        bounded: bool = True,
    ) -> Observation:
        """Take in the background gate's verdicts (with `wait`, all of them, within the time budget):
        a state that passed is committed; one that did not is undone with every state built on it,
        and the loop goes on from the last gated state. Returns the state the loop stands on."""
        if self.gate is None or not self.states.provisional:
            return state
        left = None
        if wait and bounded and self.budget.max_seconds is not None:
            left = max(0.0, self.budget.max_seconds - (time.monotonic() - start))
        began = time.monotonic()
        finished = self.gate.finished()
        last = self.states.provisional[-1].state  # outcomes come in order: its is the last
        while wait and (not finished or finished[-1].state != last):
            step = 0.5 if left is None else min(0.5, began + left - time.monotonic())
            if step <= 0:
                break
            self.view.progress(f"waiting for the background gate · {self.gate.status or 'starting'}")
            finished += self.gate.finished(True, step)
        result.gate_wait_s += time.monotonic() - began
        for outcome in finished:
            state = self._gated(outcome, state, result, memory, start)
        return state

    def _gated(
        self, outcome: GateOutcome, state: Observation, result: RunResult, memory: Memory, start: float
    ) -> Observation:
        states = self.states
        entry = next((s for s in states.provisional if s.state == outcome.state), None)
        if entry is None:  # already undone with the state it was built on
            return state
        report = outcome.report
        at = states.provisional.index(entry)
        if outcome.verdict == "passed" and report is not None and report.observation is not None:
            del states.provisional[at]
            states.gated, states.gated_id = report.observation, entry.state
            if not states.provisional:  # the loop stands on it: what the whole suite saw of it
                state, result.remaining = (
                    report.observation,
                    self.verifier.score(report.observation).remaining,
                )
            commit = self.branch.prepare(entry.changes, entry.message, self.workspace.encode)
            self._gate_record(outcome, entry, result, start, commit, [])
            self.branch.advance(commit)
            return state
        undone = states.provisional[at:]
        del states.provisional[at:]
        changes = [c for s in undone for c in s.changes]
        for lane in self._lanes():
            lane.workspace.revert_accepted(changes)
            lane.verifier.reverted(changes)
            lane.verifier.restored(lane.workspace.take_foreign())
        states.current = states.gated_id
        states.stand += 1  # back on an older state: what drafters proposed there may be unverified
        result.accepted -= len(undone)
        memory.forget({s.state for s in undone})  # what was rejected against them may do on this one
        if outcome.verdict == "rejected" and report is not None:
            memory.reject(entry.candidate, report, entry.parent)  # never verified again
        state, result.remaining = states.gated, self.verifier.score(states.gated).remaining
        self._gate_record(outcome, entry, result, start, self.branch.tip, [s.state for s in undone[1:]])
        if outcome.verdict == "rejected":
            self.view.notice(
                f"iteration {entry.state}'s edit failed its background gate and is undone"
                + (f" with {len(undone) - 1} built on it" if len(undone) > 1 else "")
                + f": {report.reason if report else outcome.verdict}"
            )
        return state

    def _gate_record(
        self,
        outcome: GateOutcome,
        entry: Provisional,
        result: RunResult,
        start: float,
        commit: str | None,
        discarded: list[int],
    ) -> None:
        report = outcome.report
        record: GateRecord = {
            "state": entry.state,
            "iteration": entry.state,
            "fingerprint": entry.candidate.fingerprint,
            "verdict": outcome.verdict,
            "reason": report.reason if report is not None else outcome.verdict,
            "failed_stage": report.failed_stage if report is not None else None,
            "duration_ms": round(outcome.duration_ms, 1),
            "remaining": self.verifier.score(self.states.gated).remaining,
            "elapsed_s": round(time.monotonic() - start, 3),
            "tests_run": report.tests_run if report is not None else 0,
            "stages": [s.to_json() for s in report.stages] if report is not None else [],
            "discarded": discarded,
            "commit": commit,
        }
        self.trace.write("gate", **record)

    def _last_gates(self, state: Observation, result: RunResult, memory: Memory, start: float) -> Observation:
        """At the end: every gate still running is waited for, or, out of time or interrupted,
        cancelled (the branch stays at the last gated state)."""
        if self.gate is None or not self.states.provisional:
            return state
        if result.outcome not in ("max_seconds", "interrupted"):  # within the time budget
            state = self._settle(state, result, memory, start, wait=True)
        if self.states.provisional:  # out of time, or interrupted: stop it
            self.gate.cancel()  # (what it runs is killed and nothing more starts: no time to wait)
            state = self._settle(state, result, memory, start, wait=True, bounded=False)
        elif result.remaining <= 0 and result.outcome != "interrupted":
            result.outcome = "goal"  # the last state's gate passed after the budget ran out
        return state

    def _live(
        self, head: str, start: float, candidate: Candidate, stop: threading.Event | None = None
    ) -> Callable[[str], None]:
        """The live line while `candidate` is verified: which one of how many, the run's time, the
        step. With `stop` (a lane's candidate): cancelled at its next step once `stop` is set, and
        shown only when it is the first of its batch."""

        def show(stage: str) -> None:
            if stop is not None and stop.is_set():
                raise Cancelled
            if not head:
                return
            gating = f" · {self.gate.status}" if self.gate is not None and self.gate.status else ""
            self.view.progress(
                f"{head} · {time.monotonic() - start:.0f}s · {candidate.description} · {stage}{gating}"
            )

        return show

    def _verdicts(
        self,
        drafts: Iterator[tuple[Candidate, float]],
        state: Observation,
        where: tuple[str, float],  # the live line's head, the loop's start
        memory: Memory,
        clock: Clock,
    ) -> Generator[tuple[Candidate, VerifyReport, float, int], None, None]:
        """Each new candidate with its verdict, its drafting time and the lane it was verified on, in
        the drafter's order. With several lanes, up to one candidate per lane is verified at once;
        when the consumer stops (an accept), those after it are cancelled at their next step."""
        head, start = where
        lanes = self._lanes()[: max(1, memory.asked)]
        if len(lanes) == 1 or memory.remote:  # (a remote drafter's candidates come one by one: each
            # is verified as it arrives, while the others are still being written)
            for k, (candidate, waited_ms) in enumerate(drafts):
                live = self._live(f"{head} {k + 1}/{max(memory.drafted, k + 1)}", start, candidate)
                yield candidate, self._verify(lanes[0], candidate, state, live), waited_ms, 0
            return
        clock.parallel = True
        with ThreadPoolExecutor(len(lanes), thread_name_prefix="ralph-lane") as pool:
            while batch := list(itertools.islice(drafts, len(lanes))):
                stop, began, done = threading.Event(), time.perf_counter(), 0
                futures = []
                for j, (candidate, _) in enumerate(batch):
                    title = (
                        f"{head} {clock.seen + 1}-{clock.seen + len(batch)}/{memory.drafted}"
                        if j == 0
                        else ""
                    )
                    live = self._live(title, start, candidate, stop)
                    futures.append(pool.submit(self._verify, lanes[j], candidate, state, live))
                try:
                    for j, ((candidate, waited_ms), future) in enumerate(zip(batch, futures, strict=True)):
                        report = future.result()
                        done = j + 1
                        yield candidate, report, waited_ms, j
                finally:
                    stop.set()
                    clock.cancelled += self._discard(futures[done:], batch[done:], lanes[done : len(batch)])
                    clock.ms += (time.perf_counter() - began) * 1000
                    clock.seen += len(batch)

    def _discard(
        self, futures: list[Future[VerifyReport]], batch: list[tuple[Candidate, float]], lanes: list[Lane]
    ) -> int:
        """The lanes' verifications after the accepted one: waited for (each stops at its next step),
        and an edit a lane accepted meanwhile taken out again. Returns how many were cancelled."""
        cancelled = 0
        for future, (candidate, _), lane in zip(futures, batch, lanes, strict=True):
            try:
                report = future.result()
            except Cancelled:
                cancelled += 1
                continue
            if report.accepted:
                changes = tuple(report.changes or candidate.changes)
                lane.workspace.revert_accepted(changes)
                lane.verifier.reverted(changes)
                lane.verifier.restored(lane.workspace.take_foreign())
        return cancelled

    def _lanes(self) -> list[Lane]:
        return [Lane(self.workspace, self.verifier), *self.lanes]

    def _adopt(self, winner: int, changes: tuple[FileChange, ...]) -> None:
        """The edit lane `winner` accepted, taken into every other lane's state."""
        for k, lane in enumerate(self._lanes()):
            if k != winner:
                lane.workspace.accept(changes)
                lane.verifier.adopt(changes)
                lane.verifier.restored(lane.workspace.take_foreign())

    def _drafts(
        self, name: str, context: DraftContext, n: int, memory: Memory
    ) -> Iterator[tuple[Candidate, float]]:
        """The drafter's new candidates, each with the drafting time it cost. A local drafter's batch
        is sorted cheapest to verify first; a remote one (`remote = True`: a model behind an API,
        which may ignore a request for n) is asked n times at once, and each candidate is verified as
        soon as it arrives while the others are still being written."""
        drafter = self.drafters[name]
        memory.new_batch(0)
        start = time.perf_counter()
        if name in memory.down:  # it failed too often: nothing more to ask of it
            return
        if getattr(drafter, "remote", False) and n > 1:
            ask = functools.partial(self._ask, drafter, context, 1, memory)
            batches: Iterable[list[Candidate]] = _as_they_come(ask, n, memory)
        else:
            batches = [sorted(self._ask(drafter, context, n, memory), key=_verification_order)]
        for batch in batches:
            memory.drafted += len(batch)
            memory.add_cost(batch)
            for candidate in batch:
                if memory.is_new(candidate):
                    yield candidate, (time.perf_counter() - start) * 1000
                    start = time.perf_counter()

    def _down_if_failing(self, name: str, memory: Memory) -> None:
        if why := memory.end_batch(self.drafters[name].name):
            self.view.notice(
                f"{name}: every draft failed {_DOWN_AFTER} iterations in a row; not asked again: {why}"
            )

    def _ask(self, drafter: Drafter, context: DraftContext, n: int, memory: Memory) -> list[Candidate]:
        """`drafter.draft`, where a failure (a model that timed out, a server that died or answered
        garbage) is that draft's failure, not the run's: an error candidate with the reason. After
        `_DOWN_AFTER` iterations in a row whose every draft failed, the drafter is not asked again."""
        try:
            drafted = drafter.draft(context, n)
        except RalphError as exc:
            memory.failed(drafter.name, str(exc))
            return [Candidate(drafter.name, "the drafter failed", (), error=str(exc))]
        memory.answered(drafter.name)
        return drafted

    def _record(
        self,
        result: RunResult,
        decision: RouteDecision,
        before: int,
        verdicts: list[CandidateRecord],
        times: tuple[float, float, float],  # the iteration's start, its drafting ms, the loop's start
        proposed: int,
        commit: str | None,
        cost: float,
    ) -> IterationRecord:
        t0, draft_ms, start = times
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
            "cost_usd": cost,
            "candidates": verdicts,
            "proposed": proposed,
            "commit": commit or self.branch.tip,
        }

    def _out_of_budget(self, result: RunResult, elapsed: float) -> str | None:
        if result.iterations >= self.budget.max_iterations:
            return "max_iterations"
        if self.budget.max_seconds is not None and elapsed >= self.budget.max_seconds:
            return "max_seconds"
        if self.budget.max_cost is not None and result.cost_usd >= self.budget.max_cost:
            return "max_cost"
        return None

    def _context(self, state: Observation, memory: Memory) -> DraftContext:
        return DraftContext(
            task=self.task,
            project=self.workspace.accepted_project,
            state_id=self.states.stand,
            **vars(self.verifier.evidence(state)),
            rejected=frozenset(memory.rejected),
            attempts=tuple(memory.attempts),
            best_rejected=memory.best,
            protected=self.protected,
        )

    def _verify(
        self, lane: Lane, candidate: Candidate, state: Observation, progress: Callable[[str], None]
    ) -> VerifyReport:
        """Apply, verify, and roll back unless accepted. The workspace always ends in a known state."""
        workspace, verifier = lane.workspace, lane.verifier
        if candidate.error:
            return VerifyReport(False, candidate.error, failed_stage="parse")
        if not candidate.changes:
            return VerifyReport(False, "the edit changes nothing", failed_stage="parse")
        try:
            if any(workspace.read(c.path) != c.before for c in candidate.changes):
                return VerifyReport(
                    False, "stale edit: a file changed since it was drafted", failed_stage="apply"
                )
            workspace.apply(candidate.changes)
        except (UnsafePath, UnicodeDecodeError) as exc:
            return VerifyReport(False, str(exc), failed_stage="apply")
        report = VerifyReport(False, "interrupted", failed_stage="interrupted")
        try:
            report = verifier.verify(candidate, state, reset=workspace.restore, progress=progress)
        finally:
            # Back to exactly the accepted state (plus the edit, when accepted): files the
            # candidate's tests wrote, changed or replaced are undone before anything else runs.
            if report.accepted:
                workspace.accept(report.changes or candidate.changes)
            else:
                workspace.rollback(candidate.changes)
            verifier.restored(workspace.take_foreign())
        return report


class Cancelled(Exception):
    """A lane's verification stopped at its next step: an earlier candidate was accepted."""


@dataclass(frozen=True)
class Lane:
    """A copy of the accepted state candidates are verified on, with its own verifier."""

    workspace: Workspace
    verifier: Verification


@dataclass
class Clock:
    """An iteration's verification with lanes side by side: its wall time, candidates started, and
    those cancelled."""

    parallel: bool = False
    ms: float = 0.0
    seen: int = 0
    cancelled: int = 0


@dataclass(frozen=True)
class Provisional:
    """A state accepted on its targeted stages, waiting for its background gate."""

    state: int  # (a state's id is the iteration whose accept made it)
    parent: int
    candidate: Candidate
    changes: tuple[FileChange, ...]
    message: str  # its commit's, once the gate passes
    unconfirmed: bool = False  # its targeted stage left failing tests unrun: its error is not known


@dataclass
class States:
    """Which state the loop stands on (by id: 0 is where the run or its resumed segment started, else
    the iteration whose accept made it), the last whose gate passed, and the provisional ones between
    them, oldest first."""

    gated: Observation
    gated_id: int = 0
    current: int = 0
    provisional: list[Provisional] = field(default_factory=list)
    # Drafters' per-state memory is keyed on this: it changes with every state the loop moves to,
    # back to an older one included (the candidates a drafter proposed there after the one that was
    # accepted and undone were never verified).
    stand: int = 0

    @property
    def unconfirmed(self) -> bool:
        return any(s.unconfirmed for s in self.provisional)


@dataclass
class Memory:
    """What this run already tried: nothing is verified twice, models see what failed and why."""

    rejected: set[str] = field(default_factory=set)
    rejected_on: dict[int, set[str]] = field(default_factory=dict)  # by the state they were judged on
    failures: dict[str, int] = field(default_factory=dict)  # a drafter's failed iterations in a row
    asked: int = 1  # candidates asked of the drafter this iteration
    remote: bool = False  # and whether it is a remote one
    _batch: dict[str, bool] = field(default_factory=dict)  # this iteration: drafter -> any draft came
    unpriced_tokens: int = 0
    _why: str = ""
    down: dict[str, str] = field(default_factory=dict)  # drafters not asked again, and why
    attempts: list[tuple[str, str]] = field(default_factory=list)  # (diff, why), latest last
    best: tuple[str, str] | None = None  # the rejected edit that came closest, for a repair
    best_remaining: int | None = None
    batch: set[str] = field(default_factory=set)  # fingerprints proposed in this iteration
    drafted: int = 0  # what the drafter returned this iteration, new or not
    _cost: float = 0.0
    _cost_lock: threading.Lock = field(default_factory=threading.Lock)

    def new_batch(self, drafted: int) -> None:
        self.batch, self.drafted = set(), drafted

    def add_cost(self, batch: list[Candidate]) -> None:
        with self._cost_lock:
            self._cost += sum(c.cost_usd or 0.0 for c in batch)
            # Tokens of no known price (a local model): the cost is unknown, not zero.
            self.unpriced_tokens += sum(c.tokens or 0 for c in batch if c.cost_usd is None)

    def add_late_cost(self, future: Future[list[Candidate]]) -> None:
        """A draft that finished after the loop moved on (called from its thread)."""
        if not future.cancelled() and future.exception() is None:
            self.add_cost(future.result())

    def spent(self) -> float:
        """What the drafts cost since the last call."""
        with self._cost_lock:
            spent, self._cost = self._cost, 0.0
        return spent

    def failed(self, drafter: str, why: str) -> None:
        """A draft of `drafter` failed (called from the drafts' threads)."""
        with self._cost_lock:
            self._batch.setdefault(drafter, False)
            self._why = why

    def answered(self, drafter: str) -> None:
        with self._cost_lock:
            self._batch[drafter] = True

    def end_batch(self, drafter: str) -> str | None:
        """The iteration's drafting is over: an iteration in which every draft failed counts once
        (parallel requests to a busy server fail together); returns why, when that makes the drafter
        down (`_DOWN_AFTER` such iterations in a row)."""
        with self._cost_lock:
            came = self._batch.pop(drafter, None)
            if came is None or came:
                self.failures.pop(drafter, None)
                return None
            self.failures[drafter] = self.failures.get(drafter, 0) + 1
            if self.failures[drafter] < _DOWN_AFTER or drafter in self.down:
                return None
            self.down[drafter] = self._why
            return self._why

    def forget(self, states: set[int]) -> None:
        """States were undone (their gate failed): what was rejected only against them is not known
        to fail on the state the loop goes back to."""
        for state in states:
            self.rejected -= self.rejected_on.pop(state, set())
        for fingerprints in self.rejected_on.values():
            self.rejected |= fingerprints

    def is_new(self, candidate: Candidate) -> bool:
        """False for an edit already rejected, or already proposed in this iteration's batch."""
        fingerprint = candidate.fingerprint
        if candidate.changes and (fingerprint in self.rejected or fingerprint in self.batch):
            return False
        self.batch.add(fingerprint)
        return True

    def reject(self, candidate: Candidate, report: VerifyReport, state: int = 0) -> None:
        """`candidate` was rejected against `state`."""
        self.rejected.add(candidate.fingerprint)
        self.rejected_on.setdefault(state, set()).add(candidate.fingerprint)
        entry = (candidate.diff or candidate.description, report.reason)
        self.attempts = [*self.attempts[-9:], entry]
        remaining = report.score.remaining if report.score is not None and candidate.changes else None
        if remaining is not None and (self.best_remaining is None or remaining < self.best_remaining):
            self.best, self.best_remaining = entry, remaining


def _as_they_come(ask: Callable[[], list[Candidate]], n: int, memory: Memory) -> Iterator[list[Candidate]]:
    """`ask()` (one candidate's draft) n times in parallel, each batch as soon as it is written. When
    the loop stops listening (an accept), the requests not yet sent are cancelled and those in flight
    are left to finish without holding the loop; what they cost is counted when they land."""
    pool = ThreadPoolExecutor(max_workers=n)
    futures = [pool.submit(ask) for _ in range(n)]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        for future in futures:
            if not future.done():
                future.add_done_callback(memory.add_late_cost)
        pool.shutdown(wait=False, cancel_futures=True)


def _verification_order(candidate: Candidate) -> int:
    """Cheapest to verify first: a parse error costs nothing, then edits touching fewer files
    (a file whose contents keep their length, a one-token swap, counts as none)."""
    if candidate.error:
        return 0
    return 1 + sum(len(c.after or "") != len(c.before or "") for c in candidate.changes)


def _summary(record: IterationRecord) -> IterationSummary:
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


def _candidate_record(candidate: Candidate, report: VerifyReport) -> CandidateRecord:
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


def _commit_message(candidate: Candidate, before: Score, report: VerifyReport) -> str:
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
