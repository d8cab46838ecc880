"""Lanes: copies of the accepted state candidates are verified on side by side (`--jobs`), each with
its own verifier, always holding the same accepted state. The first lane is the loop's own."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.errors import UnsafePath
from ralph.domain.protocols import Verification, Workspace
from ralph.domain.score import Observation
from ralph.domain.verdict import VerifyReport

# What hears each step of a candidate's verification, given which candidates of the iteration the live
# line is to name (none: a lane's candidate after the first of its batch), the candidate, and the
# event that stops a lane's verification at its next step (None: not on a lane).
Live = Callable[[tuple[int, int] | None, Candidate, threading.Event | None], Callable[[str], None]]


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


def verify(
    lane: Lane, candidate: Candidate, state: Observation, progress: Callable[[str], None]
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


@dataclass(frozen=True)
class Lanes:
    """Every lane, the loop's own first."""

    all: tuple[Lane, ...]

    def verdicts(
        self,
        drafts: Iterator[tuple[Candidate, float]],
        state: Observation,
        live: Live,
        clock: Clock,
        width: int,
    ) -> Generator[tuple[Candidate, VerifyReport, float, int], None, None]:
        """Each new candidate with its verdict, its drafting time and the lane it was verified on, in
        the drafter's order. With `width` lanes, up to one candidate per lane is verified at once;
        when the consumer stops (an accept), those after it are cancelled at their next step."""
        lanes = self.all[: max(1, width)]
        if len(lanes) == 1:
            for k, (candidate, waited_ms) in enumerate(drafts, 1):
                yield (
                    candidate,
                    verify(lanes[0], candidate, state, live((k, k), candidate, None)),
                    waited_ms,
                    0,
                )
            return
        clock.parallel = True
        with ThreadPoolExecutor(len(lanes), thread_name_prefix="ralph-lane") as pool:
            while batch := list(itertools.islice(drafts, len(lanes))):
                stop, began, done = threading.Event(), time.perf_counter(), 0
                span = (clock.seen + 1, clock.seen + len(batch))
                futures = [
                    pool.submit(
                        verify, lanes[j], candidate, state, live(None if j else span, candidate, stop)
                    )
                    for j, (candidate, _) in enumerate(batch)
                ]
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

    @staticmethod
    def _discard(
        futures: list[Future[VerifyReport]], batch: list[tuple[Candidate, float]], lanes: Sequence[Lane]
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
                _take_out(lane, tuple(report.changes or candidate.changes))
        return cancelled

    def adopt(self, winner: int, changes: tuple[FileChange, ...]) -> None:
        """The edit lane `winner` accepted, taken into every other lane's state."""
        for k, lane in enumerate(self.all):
            if k != winner:
                lane.workspace.accept(changes)
                lane.verifier.adopt(changes)
                lane.verifier.restored(lane.workspace.take_foreign())

    def revert(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` taken out of every lane's state (their background gate failed)."""
        for lane in self.all:
            _take_out(lane, changes)


def _take_out(lane: Lane, changes: Sequence[FileChange]) -> None:
    lane.workspace.revert_accepted(changes)
    lane.verifier.reverted(changes)
    lane.verifier.restored(lane.workspace.take_foreign())
