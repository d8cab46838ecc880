"""The gate off the critical path: the whole suite and every check, run beside the loop on a copy of
each provisionally accepted state.

A candidate that improves on its targeted stages becomes the loop's next state at once; its gate runs
here, in one worker thread, in the order the states were made, each in a fresh pytest child
(`pytest_run.gate_tests`) on this gate's own workspace (a clone of the accepted state) and sandbox.
The workspace always holds the last state whose gate passed: a job is that state plus one edit,
kept when the gate passes and undone when it does not. A job built on any other state (one whose gate failed) is discarded unrun.

With `keep_regressions` (`--on-gate-failure todo`) a state whose gate found only tests that passed
before and fail now is kept too, as the base of the next job: the workspace then holds it, and the
regressed tests are part of what the next state is judged against. A state built on a kept one
passes (and is committed, with the kept edits) only when it breaks nothing the last passed state
passed and has less error left; one that still carries a regression is kept in turn. Anything else
a gate finds (a check, a diagnostic, a policy refusal, no verdict) undoes the state as before.

The synchronous stages' results are judged again against the gated state the job builds on (a test
the provisional state only assumed failing may pass there), then the gate's. A gate that hangs,
crashes or is killed gives no verdict: a failed gate for its state, with the reason.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from ralph.domain.candidate import FileChange
from ralph.domain.results import StageResult
from ralph.domain.score import Observation, Score, regressed_tests, regressions
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
        keep_regressions: bool = False,
    ) -> None:
        self.workspace = workspace
        self.toolchain = toolchain
        # The loop verifier's facts, targets and time limits, with a test runner and checks of its own.
        self.context, self.steps, tools = verifier.beside(toolchain)
        self.warm = tools.gate.warm
        self.status = ""  # what the gate is doing now, for the loop's live line
        tools.gate.progress = self._show
        self._tip, self._tip_obs = 0, start  # the state the workspace holds: the next job's base
        self._passed_obs = start  # the last state whose gate passed (the tip, unless one was kept)
        self._kept: list[FileChange] = []  # the kept states' edits since then, in order
        self.keep_regressions = keep_regressions
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
            verdict, report = self._settle(job, report)
            self.status = ""
        report.duration_ms = (time.perf_counter() - start) * 1000
        if self._cancelled.is_set():
            return GateOutcome(job.state, "cancelled", report, report.duration_ms)
        if verdict == "rejected" or report.observation is None:
            return GateOutcome(job.state, "rejected", report, report.duration_ms)
        self._tip, self._tip_obs = job.state, report.observation
        if verdict == "passed":
            self._passed_obs, self._kept = report.observation, []
            return GateOutcome(job.state, "passed", report, report.duration_ms)
        self._kept += job.changes
        return GateOutcome(job.state, "rejected", report, report.duration_ms, kept=True)

    def _judge(self, job: GateJob) -> VerifyReport:
        """The job's synchronous results against the gated state it builds on, then the gate."""
        if self._broken is not None:
            return VerifyReport(False, f"gate: no verdict: {self._broken}", failed_stage="gate")
        self.workspace.restore(job.changes)  # the gated state plus the edit, exactly
        # On a kept state, the checks look at every file edited since the last passed state (the kept
        # state's gate stopped at its regression, before its checks ran), an edit undone since
        # included; what is put back before them is this job's edit alone (the copy holds the kept ones).
        candidate = replace(job.candidate, changes=job.changes)
        touched = tuple(dict.fromkeys(c.path for c in self._kept))
        attempt = Attempt(
            self.context, candidate, self._tip_obs, reset=self.workspace.restore, touched=touched
        )
        broken = attempt.merge(_observed(job.stages))
        if broken is None:
            broken, attempt = run_sequence(self.steps, attempt)
        if broken is not None:
            broken.reason = f"background {broken.reason}"
            return broken
        return attempt.report(True, f"gate passed: remaining error {attempt.before} -> {attempt.remaining}")

    def _settle(self, job: GateJob, report: VerifyReport) -> tuple[str, VerifyReport]:
        """The verdict (`gate_verdict`), and the workspace back to the next job's base: the job's
        state when it passed or is kept, else its parent. When that fails the copy is in no known
        state: this gate and every later one give no verdict."""
        verdict, report = gate_verdict(
            report,
            self._tip_obs,
            self._passed_obs if self._kept else None,
            self.context.score,
            keep_regressions=self.keep_regressions,
        )
        try:
            if self._broken is None:
                if verdict == "rejected":
                    self.workspace.rollback(job.changes)
                else:
                    self.workspace.accept(job.changes)
        except Exception as exc:
            self._broken = f"its workspace could not be put back: {type(exc).__name__}: {exc}"
        if self.toolchain.scratch is not None:
            empty_dir(self.toolchain.scratch)
        if self._broken is not None:
            return "rejected", VerifyReport(False, f"gate: no verdict: {self._broken}", failed_stage="gate")
        return verdict, report


def gate_verdict(
    report: VerifyReport,
    base: Observation,
    passed: Observation | None,
    score: Callable[[Observation], Score],
    *,
    keep_regressions: bool,
) -> tuple[str, VerifyReport]:
    """What a gate's report makes of its state, judged on `base` (the state it was built on):
    "passed", "kept" or "rejected", with the report to give. `passed` is the last state whose gate
    passed when `base` is a kept state (else None): a state built on a kept one passes only when it
    breaks nothing that one passed and has less error left, else it is kept in turn. A state is kept
    (with `keep_regressions`) only for tests that passed on `base` and fail now, the tests counted in
    its remaining error (the run cannot end on it as the goal); never for a gate that gave no
    verdict, nor for a check, a diagnostic or a syntax error it broke."""
    observed = report.observation
    if observed is None or any(s.error is not None for s in report.stages):
        return "rejected", report
    left = score(observed)
    if report.accepted:
        if passed is None:
            return "passed", report
        broken = regressions(passed, observed)
        if not broken and left.remaining < score(passed).remaining:
            return "passed", report
        if left.remaining <= 0:  # (no regression the score counts, yet not a passed state)
            return "rejected", replace(report, accepted=False, reason=f"background gate: {_still(broken)}")
        return "kept", replace(
            report, accepted=False, reason=f"background gate passed on the kept state: {_still(broken)}"
        )
    tests = regressed_tests(base, observed) if keep_regressions else ()
    counted = {*left.failing_targets, *left.regressions}
    if tests and counted.issuperset(tests):
        return "kept", report
    return "rejected", report


def _still(broken: list[str]) -> str:
    if not broken:
        return "no less error left than the last state whose gate passed"
    more = f" (+{len(broken) - 3} more)" if len(broken) > 3 else ""
    return "still breaks " + "; ".join(broken[:3]) + more + " (fine in the last state whose gate passed)"


def _observed(stages: tuple[StageResult, ...]) -> list[StageResult]:
    """The stages whose results make up an attempt's observation: after a repair (ruff's safe fixes,
    the project's format), only those run since (the ones before saw the edit before it was amended)."""
    repairs = [i for i, s in enumerate(stages) if s.stage in (RUFF_FIX, FORMAT_FIX)]
    return list(stages[repairs[-1] + 1 :] if repairs else stages)
