"""The gate off the critical path: the whole suite and every check, run beside the loop on a copy of
each provisionally accepted state.

A candidate that improves on its targeted stages becomes the loop's next state at once; its gate runs
here, in one worker thread, in the order the states were made, each in a fresh pytest child
(`pytest_run.gate_tests`) on this gate's own workspace (a clone of the accepted state) and sandbox.
The workspace always holds the last state whose gate passed: a job is that state plus one edit,
kept when the gate passes and undone when it does not. A job built on any other state (one whose gate failed) is discarded unrun.

The synchronous stages' results are judged again against the gated state the job builds on (a test
the provisional state only assumed failing may pass there), then the gate's. A gate that hangs,
crashes or is killed gives no verdict: a failed gate for its state, with the reason.
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from ralph.domain.results import StageResult
from ralph.domain.score import Observation
from ralph.domain.verdict import GateJob, GateOutcome, VerifyReport
from ralph.sandboxes.workspace import Workspace, empty_dir
from ralph.validators.stages import FORMAT_FIX, RUFF_FIX, Attempt, run_sequence
from ralph.validators.toolchain import Toolchain

if TYPE_CHECKING:
    from ralph.validators.pipeline import Verifier


class BackgroundGate:
    """`Gate` (ralph.domain.protocols): gates states one at a time beside the loop."""

    def __init__(
        self,
        verifier: Verifier,
        workspace: Workspace,
        toolchain: Toolchain,
        *,
        start: Observation,
    ) -> None:
        self.workspace = workspace
        self.toolchain = toolchain
        # The loop verifier's facts, targets and time limits, with a test runner and checks of its own.
        self.context, self.steps, tools = verifier.beside(toolchain)
        self.warm = tools.gate.warm
        self.status = ""  # what the gate is doing now, for the loop's live line
        tools.gate.progress = self._show
        self._tip, self._tip_obs = 0, start  # the last state whose gate passed (0: the start)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ralph-gate")
        self._futures: list[tuple[int, Future[GateOutcome]]] = []
        self._cancelled = threading.Event()
        self._broken: str | None = None  # why the gate's workspace is in no known state
        self._running = 0  # the state being gated

    def submit(self, job: GateJob) -> None:
        self._futures.append((job.state, self._pool.submit(self._gate, job)))

    def finished(self, wait: bool = False, timeout: float | None = None) -> list[GateOutcome]:
        deadline = None if timeout is None else time.monotonic() + timeout
        done: list[GateOutcome] = []
        while self._futures:
            state, future = self._futures[0]
            if not future.done():
                left = None if deadline is None else deadline - time.monotonic()
                if not wait or (left is not None and left <= 0):
                    break
                with contextlib.suppress(TimeoutError, CancelledError):
                    future.result(timeout=left)
                if not future.done():
                    break
            self._futures.pop(0)
            done.append(GateOutcome(state, "cancelled") if future.cancelled() else future.result())
        return done

    def cancel(self) -> None:
        self._cancelled.set()
        for _, future in self._futures:
            future.cancel()
        self.toolchain.sandbox.cancel()
        if self.warm is not None:
            self.warm.cancel()  # the run it serves gives no verdict, and nothing more starts

    def close(self) -> None:
        """Cancel what is left and wait for the worker to end (a killed process ends at once)."""
        self.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.warm is not None:
            self.warm.close()

    def _show(self, text: str) -> None:
        self.status = f"gating #{self._running}: {text}"

    def _gate(self, job: GateJob) -> GateOutcome:
        if self._cancelled.is_set():
            return GateOutcome(job.state, "cancelled")
        if job.parent != self._tip:
            return GateOutcome(job.state, "discarded")
        start = time.perf_counter()
        report = VerifyReport(False, "background gate: no verdict: cancelled", failed_stage="gate")
        self._running, self.status = job.state, f"gating #{job.state}"
        try:
            report = self._judge(job)
        except Exception as exc:
            why = f"the background gate crashed: {type(exc).__name__}: {exc}"
            report = VerifyReport(False, f"gate: no verdict: {why}", failed_stage="gate")
        finally:
            report = self._settle(job, report)
            self.status = ""
        report.duration_ms = (time.perf_counter() - start) * 1000
        if self._cancelled.is_set():
            return GateOutcome(job.state, "cancelled", report, report.duration_ms)
        if report.accepted and report.observation is not None:
            self._tip, self._tip_obs = job.state, report.observation
            return GateOutcome(job.state, "passed", report, report.duration_ms)
        return GateOutcome(job.state, "rejected", report, report.duration_ms)

    def _judge(self, job: GateJob) -> VerifyReport:
        """The job's synchronous results against the gated state it builds on, then the gate."""
        if self._broken is not None:
            return VerifyReport(False, f"gate: no verdict: {self._broken}", failed_stage="gate")
        self.workspace.restore(job.changes)  # the gated state plus the edit, exactly
        candidate = replace(job.candidate, changes=job.changes)
        attempt = Attempt(self.context, candidate, self._tip_obs, reset=self.workspace.restore)
        broken = attempt.merge(_observed(job.stages))
        if broken is None:
            broken, attempt = run_sequence(self.steps, attempt)
        if broken is not None:
            broken.reason = f"background {broken.reason}"
            return broken
        return attempt.report(True, f"gate passed: remaining error {attempt.before} -> {attempt.remaining}")

    def _settle(self, job: GateJob, report: VerifyReport) -> VerifyReport:
        """The workspace back to the gated state: the job's state when it passed, else its parent.
        When that fails the copy is in no known state: this gate and every later one give no verdict."""
        try:
            if self._broken is None:
                if report.accepted:
                    self.workspace.accept(job.changes)
                else:
                    self.workspace.rollback(job.changes)
        except Exception as exc:
            self._broken = f"its workspace could not be put back: {type(exc).__name__}: {exc}"
        if self.toolchain.scratch is not None:
            empty_dir(self.toolchain.scratch)
        if self._broken is not None:
            return VerifyReport(False, f"gate: no verdict: {self._broken}", failed_stage="gate")
        return report


def _observed(stages: tuple[StageResult, ...]) -> list[StageResult]:
    """The stages whose results make up an attempt's observation: after a repair (ruff's safe fixes,
    the project's format), only those run since (the ones before saw the edit before it was amended)."""
    repairs = [i for i, s in enumerate(stages) if s.stage in (RUFF_FIX, FORMAT_FIX)]
    return list(stages[repairs[-1] + 1 :] if repairs else stages)
