"""Provisional states: with the gate beside the loop, a candidate accepted on its targeted stages
becomes the loop's state at once and its gate is submitted; a state whose gate passes is committed,
one whose gate fails is undone with every state built on it, and the loop goes back to the last
state whose gate passed.

With `--on-gate-failure todo` a state whose gate found only regressed tests is kept instead (the
gate says so: `GateOutcome.kept`): the loop goes on from what the whole suite saw of it, the
regressed tests in its remaining error, and its edit is committed with the next state whose gate
passes. A gate that fails otherwise sends the loop back to the last kept state, if any."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ralph.domain.candidate import Candidate, FileChange, squash
from ralph.domain.events import GateRecord
from ralph.domain.protocols import Branch, Gate, Trace, View
from ralph.domain.score import Observation, Score
from ralph.domain.verdict import GateJob, GateOutcome, VerifyReport
from ralph.lanes import Lanes
from ralph.memory import Memory
from ralph.records import RunResult


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
    # States kept though their gate found regressions (`--on-gate-failure todo`), built on the gated
    # one, oldest first; what the gate saw of the last of them. Not committed until a state built on
    # them passes its gate.
    kept: list[Provisional] = field(default_factory=list)
    kept_obs: Observation | None = None
    # Drafters' per-state memory is keyed on this: it changes with every state the loop moves to,
    # back to an older one included (the candidates a drafter proposed there after the one that was
    # accepted and undone were never verified).
    stand: int = 0

    @property
    def unconfirmed(self) -> bool:
        return any(s.unconfirmed for s in self.provisional)

    @property
    def base(self) -> tuple[int, Observation]:
        """The state a failed gate sends the loop back to: the last kept one, else the gated one."""
        if self.kept and self.kept_obs is not None:
            return self.kept[-1].state, self.kept_obs
        return self.gated_id, self.gated

    def move_to(self, state: int) -> None:
        self.current = state
        self.stand += 1


@dataclass
class Gatekeeper:
    """The loop's side of the background gate: it submits provisional states and takes in verdicts."""

    gate: Gate
    states: States
    lanes: Lanes
    branch: Branch
    trace: Trace
    view: View
    score: Callable[[Observation], Score]
    encode: Callable[[str, str], bytes]

    def submit(self, i: int, candidate: Candidate, report: VerifyReport, message: str) -> None:
        """Iteration `i`'s accepted candidate: a provisional state, its gate submitted."""
        changes = tuple(report.changes or candidate.changes)
        unconfirmed = any(s.stage == "tests" and s.stopped_early for s in report.stages)
        entry = Provisional(i, self.states.current, candidate, changes, message, unconfirmed)
        self.states.provisional.append(entry)
        self.states.move_to(entry.state)
        self.gate.submit(GateJob(entry.state, entry.parent, candidate, changes, tuple(report.stages)))

    def settle(
        self,
        state: Observation,
        result: RunResult,
        memory: Memory,
        start: float,
        wait: bool,
        left: float | None,
    ) -> Observation:
        """Take in the gate's verdicts (with `wait`, all of them, for `left` seconds at most: None, no
        limit). Returns the state the loop stands on."""
        if not self.states.provisional:
            return state
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

    def last(
        self, state: Observation, result: RunResult, memory: Memory, start: float, left: float | None
    ) -> Observation:
        """At the end: every gate still running is waited for, or, out of time or interrupted,
        cancelled (the branch stays at the last gated state)."""
        if not self.states.provisional:
            return state
        if result.outcome not in ("max_seconds", "interrupted"):  # within the time budget
            state = self.settle(state, result, memory, start, True, left)
        if self.states.provisional:  # out of time, or interrupted: stop it
            self.gate.cancel()  # (what it runs is killed and nothing more starts: no time to wait)
            state = self.settle(state, result, memory, start, True, None)
        elif result.remaining <= 0 and result.outcome != "interrupted":
            result.outcome = "goal"  # the last state's gate passed after the budget ran out
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
        observed = report.observation if report is not None else None
        if outcome.verdict == "passed" and observed is not None:
            del states.provisional[at]
            carried, states.kept, states.kept_obs = states.kept, [], None
            states.gated, states.gated_id = observed, entry.state
            if not states.provisional:  # the loop stands on it: what the whole suite saw of it
                state, result.remaining = observed, self.score(observed).remaining
            changes = squash(c for s in (*carried, entry) for c in s.changes)
            commit = self.branch.prepare(changes, _with_kept(entry.message, carried), self.encode)
            self._record(outcome, entry, start, commit, [], carried=[s.state for s in carried])
            self.branch.advance(commit)
            return state
        if outcome.kept and observed is not None:
            return self._keep(outcome, entry, observed, state, result, memory, start)
        undone = states.provisional[at:]
        del states.provisional[at:]
        self.lanes.revert([c for s in undone for c in s.changes])
        base, state = states.base
        states.move_to(base)  # back on an older state: what was proposed there may be unverified
        result.accepted -= len(undone)
        memory.rejections.forget({s.state for s in undone})  # what was rejected against them may do now
        if outcome.verdict == "rejected" and report is not None:
            memory.rejections.reject(entry.candidate, report, entry.parent)  # never verified again
        result.remaining = self.score(state).remaining
        self._record(outcome, entry, start, self.branch.tip, [s.state for s in undone[1:]])
        self.view.notice(_undone(outcome, entry, len(undone) - 1))
        return state

    def _keep(
        self,
        outcome: GateOutcome,
        entry: Provisional,
        observed: Observation,
        state: Observation,
        result: RunResult,
        memory: Memory,
        start: float,
    ) -> Observation:
        """A state whose gate found regressions, kept (`--on-gate-failure todo`): the base of the
        next state; the loop, when it stands on it, goes on from what the whole suite saw of it."""
        states = self.states
        states.provisional.remove(entry)
        states.kept.append(entry)
        states.kept_obs = observed
        # Candidates rejected on it were judged on less than the gate saw (a fix of a regressed
        # test was "no improvement" there).
        memory.rejections.forget({entry.state})
        if not states.provisional:
            states.move_to(entry.state)  # the same files, a new observation: drafters start afresh
            state, result.remaining = observed, self.score(observed).remaining
        self._record(outcome, entry, start, self.branch.tip, [], kept=True)
        reason = outcome.report.reason if outcome.report is not None else outcome.verdict
        self.view.notice(
            f"iteration {entry.state}'s edit failed its background gate and is kept: what it broke is "
            f"to fix next, and it is committed with the next state whose gate passes: {reason}"
        )
        return state

    def _record(
        self,
        outcome: GateOutcome,
        entry: Provisional,
        start: float,
        commit: str | None,
        discarded: list[int],
        *,
        kept: bool = False,
        carried: list[int] | None = None,
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
            "remaining": self.score(self.states.gated).remaining,
            "elapsed_s": round(time.monotonic() - start, 3),
            "tests_run": report.tests_run if report is not None else 0,
            "stages": [s.to_json() for s in report.stages] if report is not None else [],
            "discarded": discarded,
            "commit": commit,
        }
        if kept:
            record["kept"] = "todo"
        if carried:
            record["kept_states"] = carried
        self.trace.write("gate", **record)


def _undone(outcome: GateOutcome, entry: Provisional, built_on: int) -> str:
    """What the line of a state the loop accepted, its gate pending, became: undone, and why."""
    which = f"iteration {entry.state}'s edit" + (f" (with {built_on} built on it)" if built_on else "")
    if outcome.verdict == "rejected":
        reason = outcome.report.reason if outcome.report is not None else outcome.verdict
        return f"{which} failed its background gate and is undone: {reason}"
    if outcome.verdict == "cancelled":
        return f"{which} is not committed: the run stopped before its background gate finished"
    return f"{which} is undone: its background gate gave no verdict ({outcome.verdict})"


def _with_kept(message: str, kept: list[Provisional]) -> str:
    """A commit's message, naming the kept states whose edits it also holds."""
    if not kept:
        return message
    which = ", ".join(str(s.state) for s in kept)
    return (
        message + f"Also holds the edits of iterations {which} (kept though their gate found regressions).\n"
    )
