"""The stage runner on its own, with small stages behind the Stage Protocol: order, concurrency,
fail-closed handling, must-improve steps and repairs; and the failed-first and coverage-cache modules."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.results import StageResult, TestResult
from ralph.domain.score import Observation, Score, score
from ralph.validators.coverage import CoverageCache
from ralph.validators.failed_first import RecentFailures
from ralph.validators.selection import Selection
from ralph.validators.stages import (
    Attempt,
    StartedStage,
    Step,
    can_see,
    drop_started,
    run_sequence,
    run_step,
    select_ahead,
    start_step,
)


class Scorer:
    """The part of the Verifier an Attempt uses."""

    def __init__(self, baseline: Observation) -> None:
        self.baseline = baseline

    def score(self, obs: Observation) -> Score:
        return score(self.baseline, obs)


@dataclass
class Fixed:
    """A stage that reports the given tests (or gives no verdict), and logs when it ran."""

    name: str
    tests: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    log: list[str] = field(default_factory=list)
    want: bool = True
    wait: threading.Event | None = None

    def wanted(self, attempt: Attempt) -> bool:
        return self.want

    def run(self, attempt: Attempt) -> StageResult:
        if self.wait is not None:
            assert self.wait.wait(5), "the stages of a step did not run together"
        self.log.append(self.name)
        results = [TestResult(t, o) for t, o in self.tests.items()]
        return StageResult(self.name, ok=True, duration_ms=0.0, tests=results, error=self.error)


class Process(StartedStage):
    def __init__(self, log: list[str], early: bool = True) -> None:
        self.name, self.log, self.ahead = "proc", log, early

    def wanted(self, attempt: Attempt) -> bool:
        return True

    def early(self, attempt: Attempt) -> bool:
        return self.ahead

    def start(self, attempt: Attempt) -> Callable[[], StageResult]:
        self.log.append("proc started")

        def finish() -> StageResult:
            self.log.append("proc collected")
            return StageResult("proc", ok=True, duration_ms=0.0)

        return finish


BASE = Observation({"t::fails": TestResult("t::fails", "failed"), "t::ok": TestResult("t::ok", "passed")})


def attempt() -> Attempt:
    change = FileChange("m.py", "a = 1\n", "a = 2\n")
    return Attempt(Scorer(BASE), Candidate("test", "edit", (change,)), BASE)  # type: ignore[arg-type]


def test_steps_run_in_order_until_one_gives_no_verdict() -> None:
    log: list[str] = []
    steps = (
        Step((Fixed("one", log=log),)),
        Step((Fixed("two", error="killed", log=log),)),
        Step((Fixed("three", log=log),)),
    )
    broken, _ = run_sequence(steps, attempt())
    assert broken is not None and not broken.accepted
    assert broken.reason == "two: no verdict: killed" and broken.failed_stage == "two"
    assert log == ["one", "two"]


def test_a_regression_is_blamed_on_the_stage_that_showed_it() -> None:
    steps = (Step((Fixed("a", {"t::fails": "passed"}), Fixed("b", {"t::ok": "failed"}))),)
    broken, _ = run_sequence(steps, attempt())
    assert broken is not None and broken.failed_stage == "b"
    assert broken.reason == "b: breaks test t::ok"


def test_the_stages_of_a_step_run_together_and_merge_in_declared_order() -> None:
    both = threading.Event()
    log: list[str] = []

    @dataclass
    class Second(Fixed):
        def run(self, attempt: Attempt) -> StageResult:
            both.set()  # the first is still waiting for this one
            return super().run(attempt)

    run = attempt()
    assert run_step(Step((Fixed("first", wait=both, log=log), Second("second", log=log))), run) is None
    assert log == ["second", "first"]
    assert [s.stage for s in run.stages] == ["first", "second"]


def test_a_started_stage_is_started_first_and_a_crash_is_no_verdict() -> None:
    log: list[str] = []

    class Boom(Fixed):
        def run(self, attempt: Attempt) -> StageResult:
            log.append("boom")
            raise RuntimeError("on what the candidate left")

    broken = run_step(Step((Boom("boom"), Process(log))), attempt())
    assert log == ["proc started", "boom", "proc collected"]
    assert broken is not None and not broken.accepted and broken.failed_stage == "boom"
    assert broken.reason == "boom: no verdict: the stage crashed: RuntimeError: on what the candidate left"


def test_a_step_begun_ahead_is_not_started_again_and_its_ahead_work_runs_while_it_works() -> None:
    # The verifier starts the first step's processes (ruff) before the policy reads the edit; the
    # tests step's selection is made while they work, only once the step's own stages passed.
    log: list[str] = []
    step = Step((Fixed("syntax", log=log), Process(log)), ahead=lambda a: log.append("ahead"))
    run = attempt()
    started = start_step(step, run)
    log.append("policy")
    assert run_sequence((step, Step((Fixed("tests", log=log),))), run, started)[0] is None
    assert log == ["proc started", "policy", "syntax", "ahead", "proc collected", "tests"]
    log.clear()
    broken = run_step(Step((Fixed("syntax", error="no", log=log), Process(log)), ahead=log.append), attempt())
    assert broken is not None and log == ["proc started", "syntax", "proc collected"]
    log.clear()
    refused = start_step(step, attempt())
    drop_started(refused)  # (a refused candidate's: waited for, never merged)
    drop_started(refused)
    assert log == ["proc started", "proc collected"]
    log.clear()
    # One that would keep something of the edit (a server that reads its settings when it starts)
    # starts with its step, after the policy.
    late = Step((Fixed("syntax", log=log), Process(log, early=False)))
    run = attempt()
    started = start_step(late, run)
    log.append("policy")
    assert run_step(late, run, started) is None
    assert log == ["policy", "proc started", "syntax", "proc collected"]
    drop_started(started)
    assert log[-1] == "proc collected" and len(log) == 4


def test_the_selection_made_ahead_is_kept_and_a_failure_there_is_met_again_in_its_step() -> None:
    run = attempt()
    chosen = Selection(tests=["t::ok"])
    calls: list[int] = []

    class Context:
        def score(self, obs: Observation) -> Score:
            return score(BASE, obs)

        def selection(self, candidate: Candidate) -> Selection:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("the index was being rebuilt")
            return chosen

    run.context = Context()  # type: ignore[assignment]
    select_ahead(run)  # (the failure is not the static step's)
    assert run.selection is chosen and len(calls) == 2
    select_ahead(run)
    assert len(calls) == 2


def test_a_step_that_must_improve_rejects_what_does_not() -> None:
    steps = (Step((Fixed("tests", {"t::fails": "failed"}),), must_improve="no improvement", blame="gate"),)
    broken, _ = run_sequence(steps, attempt())
    assert broken is not None and (broken.reason, broken.failed_stage) == ("no improvement", "gate")
    fixed = (Step((Fixed("tests", {"t::fails": "passed"}),), must_improve="no improvement"),)
    assert run_sequence(fixed, attempt())[0] is None


def test_an_unwanted_stage_does_not_run_and_a_repair_replaces_the_attempt() -> None:
    log: list[str] = []
    repaired = attempt()
    step = Step(
        (Fixed("lint", error="crashed", log=log), Fixed("off", want=False, log=log)),
        repair=lambda a: repaired,
    )
    broken, final = run_sequence((step,), attempt())
    assert broken is None and final is repaired
    assert log == ["lint"]


def test_failed_first_keeps_the_latest_fast_failures() -> None:
    recent = RecentFailures(keep=2, probe_s=0.05)
    recent.saw([TestResult("a", "failed"), TestResult("b", "passed"), TestResult("c", "error")])
    recent.saw([TestResult("d", "failed")])
    assert recent.first({}) == ["d", "c"]  # most recent first, "a" dropped
    assert recent.first({"d": 1.0}) == ["c"]  # a slow test is no first probe


def test_the_coverage_cache_is_keyed_by_the_projects_sources(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "m.py").write_text("a = 1\n")
    (project / "notes.txt").write_text("x")
    cache = CoverageCache(tmp_path / "cache", project, "python3")
    assert cache.load() is None
    cache.store({"t": {"m.py": [1]}})
    (project / "notes.txt").write_text("y")  # not a source: same key
    assert CoverageCache(tmp_path / "cache", project, "python3").load() == {"t": {"m.py": [1]}}
    (project / "m.py").write_text("a = 2\n")
    assert CoverageCache(tmp_path / "cache", project, "python3").load() is None
    assert CoverageCache(tmp_path / "cache", project, "other-python").load() is None


def test_a_failing_test_is_skipped_only_when_its_coverage_vouches_for_it() -> None:
    selection = Selection(tests=["t.py::sees"])
    coverage = {"t.py::sees": {"m.py": [1]}, "t.py::elsewhere": {"n.py": [1]}, "t.py::moved": {"a.py": [3]}}
    failing = ["t.py::sees", "t.py::elsewhere", "t.py::moved", "t.py::new"]
    # "new" has no coverage at all; "moved" ran a file an accepted edit changed since it was measured.
    assert can_see(failing, selection, coverage, accepted={"a.py"}) == [
        "t.py::sees",
        "t.py::moved",
        "t.py::new",
    ]
    assert can_see(failing, Selection(everything=True), coverage) == failing
    # Module-level or import-time code: its tests came from imports, which a lazy import escapes.
    assert can_see(failing, Selection(tests=["t.py::sees"], by_imports=True), coverage) == failing
    # A failure whose traceback runs through a changed file sees the change, whatever coverage says.
    assert "t.py::elsewhere" in can_see(failing, selection, coverage, seen={"t.py::elsewhere"})
