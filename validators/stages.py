"""Verification as a declared sequence of steps, each a few stages with one job, and the one runner
that owns their order, concurrency, fail-closed handling and timing.

A stage observes (it returns a StageResult); the runner decides: a stage that gives no verdict fails
the candidate, a regression fails it at the stage that showed it, and a step that must improve
fails it when the remaining error did not go down. A stage gets the attempt, whose `context` holds
the parts it may use (never the verifier). Adding a stage is a class (here, or in the module of its
validator) and an entry in the registry (validators/plan.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.results import Scope, StageResult, TestResult
from ralph.domain.score import Observation, Score, is_under, regressions, score
from ralph.domain.verdict import VerifyReport
from ralph.validators.api import ApiValidator
from ralph.validators.command import CommandValidator
from ralph.validators.facts import BaselineFacts, Budgets, VerifySettings
from ralph.validators.format import FormatValidator
from ralph.validators.impact import TestImpact
from ralph.validators.mypy import MypyValidator
from ralph.validators.plausibility import PlausibilityValidator
from ralph.validators.pytest_run import PytestValidator
from ralph.validators.ruff import RESIDENT, Accepted, RuffValidator
from ralph.validators.selection import CoverageMap, Selection
from ralph.validators.syntax import SyntaxValidator
from ralph.validators.tools import Tools

Reset = Callable[[Sequence[FileChange]], object]
# The notes a repair leaves among an attempt's stages (the edit was amended there): ruff's safe fixes,
# the project's format.
RUFF_FIX, FORMAT_FIX = "ruff-fix", "format-fix"


@dataclass(frozen=True)
class Context:
    """What a stage may use: its copy's validators, the baseline's facts, the time budgets, the
    test-impact index and the settings."""

    tools: Tools
    facts: BaselineFacts
    budgets: Budgets
    impact: TestImpact
    settings: VerifySettings

    def score(self, obs: Observation) -> Score:
        only = frozenset(self.settings.only or ())
        return score(self.facts.observation, obs, self.settings.targets, only)

    def selection(self, candidate: Candidate) -> Selection:
        return self.impact.select(candidate)


@dataclass
class Attempt:
    """One candidate's way through the sequence: the stages run so far and what they add up to."""

    context: Context
    candidate: Candidate
    current: Observation  # the accepted state it is judged against
    reset: Reset | None = None  # puts the workspace back to the accepted state plus given changes
    progress: Callable[[str], None] | None = None  # hears each step's stages as they start
    merged: Observation = field(init=False)
    stages: list[StageResult] = field(default_factory=list)
    amended: bool = False  # the candidate was changed by ruff's safe fixes
    # Files edited since the last state whose gate passed besides the candidate's (a kept state's,
    # `--on-gate-failure todo`): the checks look at them too; the workspace already holds them.
    touched: tuple[str, ...] = ()
    _selection: Selection | None = None

    def __post_init__(self) -> None:
        self.merged = self.current
        self.before = self.context.score(self.current).remaining

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.candidate.paths, *self.touched)))

    @property
    def selection(self) -> Selection:
        """The tests that can see the change (computed once per attempt)."""
        if self._selection is None:
            self._selection = self.context.selection(self.candidate)
        return self._selection

    @property
    def remaining(self) -> int:
        return self.context.score(self.merged).remaining

    def report(self, accepted: bool, reason: str, failed_stage: str | None = None) -> VerifyReport:
        score = self.context.score(self.merged)
        return VerifyReport(accepted, reason, self.stages, self.merged, score, failed_stage=failed_stage)

    def merge(self, results: Sequence[StageResult]) -> VerifyReport | None:
        """Add finished stages, in order, and report the first that could not give a verdict (the
        candidate fails: a tool that crashed or timed out vouches for nothing), else the first
        regression."""
        self.stages.extend(results)
        for result in results:
            if result.error is not None:
                return self.report(
                    False, f"{result.stage}: no verdict: {result.error}", failed_stage=result.stage
                )
        broken = None
        for result in results:  # merged one at a time, so a regression is blamed on its stage
            self.merged = self.merged.overlay(result)
            broken = broken or self._regressions(result)
        return broken

    def _regressions(self, stage: StageResult) -> VerifyReport | None:
        broken = regressions(self.current, self.merged)
        if not broken:
            return None
        more = f" (+{len(broken) - 3} more)" if len(broken) > 3 else ""
        reason = f"{stage.stage}: breaks " + "; ".join(broken[:3]) + more
        return self.report(False, reason, failed_stage=stage.stage)


class Stage(Protocol):
    """One check of a candidate. `wanted`: whether it has anything to do for this attempt."""

    name: str

    def wanted(self, attempt: Attempt) -> bool: ...

    def run(self, attempt: Attempt) -> StageResult: ...


Repair = Callable[[Attempt], "Attempt | None"]


@dataclass(frozen=True)
class Step:
    """Stages that run together. `before`: what is done first (the workspace put back); `repair`:
    a second chance when the step fails (ruff's safe fixes), returning the attempt to go on with;
    `must_improve`: the reason a candidate is rejected with when, after the step, its remaining
    error is not below the accepted state's; `ahead`: what a later step needs of the attempt, done
    while this step's processes work, once its other stages passed (their wait hides it)."""

    stages: tuple[Stage, ...]
    before: Callable[[Attempt], None] | None = None
    repair: Repair | None = None
    must_improve: str | None = None
    blame: str | None = None  # the failed stage named for `must_improve`
    ahead: Callable[[Attempt], None] | None = None


@dataclass
class Started:
    """A step's wanted stages and the collectors of those started already (by position); `taken`
    once `run_step` (or `drop_started`) took them over."""

    stages: list[Stage]
    running: dict[int, Callable[[], StageResult]]
    taken: bool = False


def start_step(step: Step, attempt: Attempt) -> Started:
    """Before the policy has read the edit: start those of a step's stages that may (a process of
    their own that reads the edit, never runs it, and keeps nothing of it: `StartedStage.early`).
    `run_step` goes on from here."""
    stages = [s for s in step.stages if s.wanted(attempt)]
    early = {i: s for i, s in enumerate(stages) if isinstance(s, StartedStage) and s.early(attempt)}
    return Started(stages, {i: _start(s, attempt) for i, s in early.items()})


def drop_started(started: Started) -> None:
    """Wait for started stages whose results nobody will read (their processes' files closed);
    nothing when `run_step` took them."""
    if not started.taken:
        started.taken = True
        for finish in started.running.values():
            finish()


def run_step(step: Step, attempt: Attempt, started: Started | None = None) -> VerifyReport | None:
    """Run a step's wanted stages (a started one first, the rest inline or in threads) and merge
    their results in declared order; `started`: the step as `start_step` began it."""
    if started is None or started.taken:
        started = Started([s for s in step.stages if s.wanted(attempt)], {})
    started.taken = True
    stages, running = started.stages, started.running
    for i, stage in enumerate(stages):  # (those not started ahead, first too)
        if isinstance(stage, StartedStage) and i not in running:
            running[i] = _start(stage, attempt)
    inline = [(i, s) for i, s in enumerate(stages) if i not in running]
    results: dict[int, StageResult] = {}
    try:
        if len(inline) == 1:
            results[inline[0][0]] = _run(inline[0][1], attempt)
        elif inline:
            with ThreadPoolExecutor(max_workers=len(inline)) as pool:
                futures = {i: pool.submit(_run, s, attempt) for i, s in inline}
                results.update({i: f.result() for i, f in futures.items()})
        if step.ahead is not None and running and all(r.ok and r.error is None for r in results.values()):
            step.ahead(attempt)
    finally:
        for i, finish in running.items():  # always waited for (and its files closed)
            results[i] = finish()
    return attempt.merge([results[i] for i in range(len(stages))]) if stages else None


def select_ahead(attempt: Attempt) -> None:
    """The tests that can see the change, chosen while ruff lints (chosen again in the tests step,
    which then reports what went wrong, where choosing fails here)."""
    with contextlib.suppress(Exception):
        _ = attempt.selection  # (computed once, kept by the attempt)


# A validator that crashes (on what a candidate left, say) fails that candidate, not the run: its
# stage gives no verdict.


def _crashed(stage: Stage, exc: Exception) -> StageResult:
    error = f"the stage crashed: {type(exc).__name__}: {exc}"
    return StageResult(stage.name, ok=False, duration_ms=0.0, detail=error, error=error)


def _run(stage: Stage, attempt: Attempt) -> StageResult:
    try:
        return stage.run(attempt)
    except Exception as exc:
        return _crashed(stage, exc)


def _start(stage: StartedStage, attempt: Attempt) -> Callable[[], StageResult]:
    try:
        finish = stage.start(attempt)
    except Exception as exc:
        failed = _crashed(stage, exc)
        return lambda: failed

    def collect() -> StageResult:
        try:
            return finish()
        except Exception as exc:
            return _crashed(stage, exc)

    return collect


def run_sequence(
    steps: Sequence[Step], attempt: Attempt, started: Started | None = None
) -> tuple[VerifyReport | None, Attempt]:
    """The steps in order until one rejects the candidate: (that rejection or None, the attempt as
    it ended, which a repair may have replaced); `started`: the first step, begun (`start_step`)."""
    for n, step in enumerate(steps):
        if step.before is not None:
            step.before(attempt)
        if attempt.progress is not None:
            names = [s.name for s in step.stages if s.wanted(attempt)]
            if names:
                attempt.progress(" + ".join(dict.fromkeys(names)))
        broken = run_step(step, attempt, started if n == 0 else None)
        if broken is not None and step.repair is not None and (repaired := step.repair(attempt)):
            attempt, broken = repaired, None
        if broken is not None:
            return broken, attempt
        if step.must_improve is not None and attempt.remaining >= attempt.before:
            return attempt.report(False, step.must_improve, failed_stage=step.blame), attempt
    return None, attempt


def put_back(attempt: Attempt) -> None:
    """Before the last steps: the workspace back to exactly the accepted state plus the candidate."""
    if attempt.reset is not None:
        attempt.reset(attempt.candidate.changes)


class StartedStage:
    """A stage that runs a process of its own: started first and collected last, so the other
    stages of its step run while it works (the compile beside ruff, say) without a thread."""

    name = ""

    def wanted(self, attempt: Attempt) -> bool:
        return True

    def start(self, attempt: Attempt) -> Callable[[], StageResult]:
        raise NotImplementedError

    def early(self, attempt: Attempt) -> bool:
        """Whether it may start before the policy has read the edit: it reads the edit, never runs
        it, and keeps nothing of it once collected (a refused candidate's result is dropped)."""
        return False

    def run(self, attempt: Attempt) -> StageResult:
        return self.start(attempt)()


# The stages. Each holds the validator it drives; the attempt says what to look at.


@dataclass
class SyntaxStage:
    """Every changed Python file compiles (and its bytecode is written where the tests may use it)."""

    validator: SyntaxValidator
    name: str = "syntax"

    def wanted(self, attempt: Attempt) -> bool:
        return True

    def run(self, attempt: Attempt) -> StageResult:
        return self.validator.check(Scope(paths=attempt.paths))


@dataclass
class LintStage(StartedStage):
    """ruff on the changed files: in the static step, its resident server where it can answer
    (validators/ruff_server.py); `settled`, `ruff check` again where it did, so no accept rests on
    the server's word."""

    validator: RuffValidator
    settled: bool = False
    name: str = "ruff"

    def wanted(self, attempt: Attempt) -> bool:
        return not self.settled or any(
            s.stage == self.name and s.detail.endswith(RESIDENT) for s in attempt.stages
        )

    def early(self, attempt: Attempt) -> bool:
        return not self.settled and self.validator.keeps_nothing()

    def start(self, attempt: Attempt) -> Callable[[], StageResult]:
        if self.settled:
            return self.validator.start(Scope(paths=attempt.paths))
        ruff = attempt.current.diagnostics
        accepted = {
            c.path: Accepted(c.before, ruff.get(("ruff", c.path), ()))
            for c in attempt.candidate.changes
            if c.before is not None
        }
        return self.validator.start(Scope(paths=attempt.paths), accepted)


@dataclass
class PlausibilityStage(StartedStage):
    """Signs of a wrong fix in what the edit changed: a parameter or variable that becomes unused, a
    name compared with itself, branches that became the same (validators/plausibility.py)."""

    validator: PlausibilityValidator
    name: str = "plausibility"

    def wanted(self, attempt: Attempt) -> bool:
        return self.validator.mode != "off"

    def start(self, attempt: Attempt) -> Callable[[], StageResult]:
        return self.validator.start(attempt.candidate.changes)


@dataclass
class ApiStage:
    """The public API of the changed modules is kept (validators/api.py): griffe, in process, on the
    texts before and after."""

    validator: ApiValidator
    name: str = "api"

    def wanted(self, attempt: Attempt) -> bool:
        return self.validator.enabled

    def run(self, attempt: Attempt) -> StageResult:
        return self.validator.check(attempt.candidate.changes)


@dataclass
class FormatStage(StartedStage):
    """The changed files as the project formats them (validators/format.py): what formatting would
    change is a fixable diagnostic, which the static step's repair applies."""

    validator: FormatValidator
    name: str = "format"

    def wanted(self, attempt: Attempt) -> bool:
        return self.validator.enabled

    def start(self, attempt: Attempt) -> Callable[[], StageResult]:
        return self.validator.start(attempt.candidate.changes)


@dataclass
class TypesStage:
    """The type checker on the changed files. Beside the targeted tests only when the accepted state
    has type errors (whether the candidate improves depends on it then); `settled`: after the tests,
    on the workspace put back, for a candidate they showed improves (again, when the first check
    ran: the candidate's tests ran beside it and could rewrite what it read). A candidate that
    improves nothing never pays for a type check (docs/measurements.md)."""

    settled: bool = False
    name: str = "mypy"

    def wanted(self, attempt: Attempt) -> bool:
        if attempt.context.tools.mypy is None:
            return False
        if not self.settled:
            return any(tool == self.name for tool, _ in attempt.current.diagnostics)
        checked = any(s.stage == self.name for s in attempt.stages)
        return not checked or attempt.reset is not None

    def run(self, attempt: Attempt) -> StageResult:
        checker: MypyValidator | None = attempt.context.tools.mypy
        assert checker is not None  # wanted() said so
        return checker.check(Scope(paths=attempt.paths, timeout_s=attempt.context.budgets.types_timeout_s))


@dataclass
class FailingTestsStage:
    """The failing tests of the accepted state that can see the change, until one passes: can it
    improve anything at all? A failing test that never entered the changed function bodies at the
    baseline runs exactly as before up to its failure (tests are assumed not to depend on what
    other tests left in their process), so it is not run here; the gate runs it. Changes beyond
    function bodies keep every failing test (see `can_see`)."""

    validator: PytestValidator
    name: str = "tests"

    def wanted(self, attempt: Attempt) -> bool:
        return bool(attempt.current.failing_tests())

    def run(self, attempt: Attempt) -> StageResult:
        failing = attempt.current.failing_tests()
        # A failure whose traceback passes through a changed file can see the change too.
        through = {t for t in failing if any(f[0] in attempt.paths for f in attempt.current.tests[t].frames)}
        impact = attempt.context.impact
        affected = can_see(failing, attempt.selection, impact.coverage, impact.accepted_paths, through)
        unaffected = len(failing) - len(affected)
        if not affected:
            detail = f"none of the {len(failing)} failing tests can see the change"
            return StageResult(
                self.name, ok=True, duration_ms=0.0, skipped=True, detail=detail, unaffected=unaffected
            )
        hung = all("per-test limit" in attempt.current.tests[t].message for t in affected)
        budgets = attempt.context.budgets
        # A test the candidate makes run ten times longer than the suite's slowest (at least 2 s) is
        # cut there: a loop the edit made endless costs seconds, not the project's limit.
        limit = budgets.hang_limit_s
        timeout = budgets.hang_timeout_s if hung else budgets.quick_timeout_s
        scope = Scope(tests=tuple(affected), timeout_s=timeout, test_timeout_s=limit)
        result = self.validator.check(scope, stop_on_pass=not _all_of(affected, attempt.context))
        result.unaffected = unaffected
        if unaffected:
            result.detail += f" ({unaffected} failing tests that cannot see the change not run)"
        # Tests left unrun: the state's error is not known until the gate has run them.
        result.stopped_early = len(result.tests) < len(affected)
        if result.stopped_early:
            result.detail += " (stopped at the first that passes)"
        return result


def _all_of(tests: Sequence[str], context: Context) -> bool:
    """Whether to run every one of these tests rather than stop at the first that passes: when the
    gate runs beside the loop and they are cheap (a quarter of the suite's time at most), so the
    state an accept makes is known at once and the loop need not wait for its gate."""
    facts = context.facts
    cost = sum(facts.durations.get(t, facts.suite_s) for t in tests)
    return context.settings.background and cost <= 0.25 * facts.suite_s


# Tests in a regression probe (`ProbeStage`): the narrowest that ran a changed line.
PROBE = 16


@dataclass
class ProbeStage:
    """Before a state is taken provisionally (the gate runs beside the loop), the passing tests that
    ran a changed line at the baseline, the narrowest `PROBE` in pytest's order, stopping at the
    first that fails: a regression found here costs a probe, not a state (and all built on it) undone
    by its gate. Run alone they may fail only for their order (a test that depends on one left out):
    a failure is confirmed by the whole gate in line, on the workspace put back, whose verdict is the
    stage's; a correct fix is never rejected by the probe alone."""

    validator: PytestValidator
    gate: PytestValidator
    name: str = "probe"

    def wanted(self, attempt: Attempt) -> bool:
        return attempt.context.settings.background and bool(self._tests(attempt))

    def run(self, attempt: Attempt) -> StageResult:
        tests = self._tests(attempt)
        budgets = attempt.context.budgets
        scope = Scope(tests=tests, timeout_s=budgets.quick_timeout_s, test_timeout_s=budgets.hang_limit_s)
        probe = self.validator.check(scope, guard=tests)
        probe.stage = self.name
        if probe.error is not None or not any(t.failing for t in probe.tests):
            return probe
        put_back(attempt)  # (what the probe's tests wrote is gone before the gate runs)
        confirmed = GateStage(self.gate).run(attempt)
        confirmed.detail = f"the probe saw {_failed(probe)} fail; the whole gate, in line: {confirmed.detail}"
        return confirmed

    @staticmethod
    def _tests(attempt: Attempt) -> tuple[str, ...]:
        """The passing tests of the accepted state that ran a changed line, the narrowest first,
        `PROBE` at most, in pytest's order (the baseline's)."""
        passing = attempt.current.passing_tests()
        chosen = [t for t in attempt.selection.near if t in passing][:PROBE]
        order = {t: i for i, t in enumerate(attempt.context.facts.durations)}
        return tuple(sorted(chosen, key=lambda t: order.get(t, len(order))))


def _failed(result: StageResult) -> str:
    return ", ".join(t.nodeid for t in result.tests if t.failing)[:300]


def can_see(
    tests: Sequence[str],
    selection: Selection,
    coverage: CoverageMap,
    accepted: Collection[str] = (),
    seen: Collection[str] = (),
) -> list[str]:
    """The `tests` the selection covers (all of them when the change can affect anything, or reaches
    beyond function bodies coverage vouches for), those in
    `seen`, and those whose coverage cannot vouch for it: a test with none, or one that ran a file an
    accepted edit changed since the coverage was measured (its path may be another by now)."""
    if selection.everything or selection.by_imports or "." in selection.tests:
        return list(tests)
    return [
        t
        for t in tests
        if t in seen
        or any(is_under(t, s) for s in selection.tests)
        or t not in coverage
        or any(path in accepted for path in coverage[t])
    ]


@dataclass
class FailingChecksStage:
    """The custom checks failing in the accepted state."""

    validator: CommandValidator
    name: str = "checks"

    def wanted(self, attempt: Attempt) -> bool:
        return bool(self._failing(attempt))

    def run(self, attempt: Attempt) -> StageResult:
        timeout = attempt.context.budgets.quick_timeout_s
        return self.validator.check(Scope(timeout_s=timeout), self._failing(attempt))

    def _failing(self, attempt: Attempt) -> list[str]:
        """The failing checks that look at what the edit touched (the others cannot change)."""
        failing = [c for c, r in attempt.current.checks.items() if not r.passed]
        return self.validator.for_edit(attempt.paths, failing)


@dataclass
class SelectedTestsStage:
    """The tests that can see the change (coverage and imports), failing fast, recent failures first."""

    validator: PytestValidator
    name: str = "tests"

    def wanted(self, attempt: Attempt) -> bool:
        return True

    def run(self, attempt: Attempt) -> StageResult:
        """A large selection runs in two rounds: the tests likeliest to fail first (`first_round`),
        alone, and only when they all pass, the rest: a broken candidate usually fails in the first,
        whose run collects a module or two instead of every module the selection reaches."""
        selection, context = attempt.selection, attempt.context
        if not selection.tests and not selection.everything:
            return StageResult(
                "tests", ok=True, duration_ms=0.0, skipped=True, detail="no test can see the change"
            )
        tests = None if selection.everything else tuple(selection.tests)
        known = attempt.current.tests.keys()  # (the state's tests: a class all asked for is named whole)
        first = context.impact.first_round(selection, context.facts.durations)
        if first:
            result = self._fail_fast(first, selection, context, known)
            if self.validator.last_refused:  # (a baseline id it cannot find again: one round)
                refused_ms = result.duration_ms
                result = self._fail_fast(tests, selection, context, known)
                result.duration_ms += refused_ms  # (the refused run's time counts too)
            elif result.error is None and not any(t.failing for t in result.tests):
                ran = set(first)
                rest = tuple(t for t in selection.tests if t not in ran)
                result = _after(result, self._fail_fast(rest, selection, context, known))
        else:
            result = self._fail_fast(tests, selection, context, known)
        count = len(selection.tests) if tests else "all"
        result.detail += f" ({count} selected: " + "; ".join(selection.reasons[:5]) + ")"
        return result

    def _fail_fast(
        self, tests: tuple[str, ...] | None, selection: Selection, context: Context, known: Collection[str]
    ) -> StageResult:
        recent = context.impact.recent_failures
        result = self.validator.check(
            Scope(tests=tests, timeout_s=context.budgets.quick_timeout_s),
            exitfirst=True,
            failed_first=recent.first(context.facts.durations),
            words=selection.words,
            near=selection.near,
            known=known,
        )
        recent.saw(result.tests)
        return result


def _after(first: StageResult, rest: StageResult) -> StageResult:
    """A second round's result, with the first round's passing tests and time before it (a test
    the second round ran again, in a module it ran whole, as the second round saw it)."""
    again = {t.nodeid for t in rest.tests}
    rest.tests = [*(t for t in first.tests if t.nodeid not in again), *rest.tests]
    rest.duration_ms += first.duration_ms
    rest.detail += f" (after a first round of {len(first.tests)} passing)"
    return rest


@dataclass
class GateStage:
    """The whole suite, in a fresh fork of the gate's own worker (`pytest_run.gate_tests`), on the
    workspace put back to exactly the accepted state plus the candidate: the last word, so a
    test-selection miss is never accepted. The run stops at the first test that passed in the
    accepted state and fails now (a regression: the candidate is rejected whatever the rest does).
    A test of the state that a complete run no longer reports fails (a failing target that vanished
    is not fixed)."""

    validator: PytestValidator
    name: str = "gate"

    def wanted(self, attempt: Attempt) -> bool:
        return True

    def run(self, attempt: Attempt) -> StageResult:
        # In pytest's own order, as the baseline ran: reordering exposes tests that depend on their
        # order (docs/measurements.md), a false regression.
        suite = self.validator.check(
            Scope(timeout_s=attempt.context.budgets.gate_timeout_s), guard=attempt.current.passing_tests()
        )
        if suite.error is None and not suite.stopped_early:
            reported = {t.nodeid for t in suite.tests}
            suite.tests += [
                TestResult(t, "error", message="disappeared from the suite")
                for t in sorted(set(attempt.current.tests) - reported)
                # a module that failed to collect (its path, no "::") is there when its tests are
                if "::" in t or not any(t == "." or is_under(r, t) for r in reported)
            ]
            suite.complete_tests = True
        return suite


@dataclass
class AllChecksStage:
    """Every custom check that looks at what the edit touched, on the state the gate saw."""

    validator: CommandValidator
    name: str = "checks"

    def wanted(self, attempt: Attempt) -> bool:
        return bool(self.validator.for_edit(attempt.paths))

    def run(self, attempt: Attempt) -> StageResult:
        # A check whose declared files the edit did not touch keeps its verdict on the accepted state.
        commands = self.validator.for_edit(attempt.paths)
        return self.validator.check(Scope(timeout_s=attempt.context.budgets.gate_timeout_s), commands)
