"""The `Verifier`: judges candidates against the accepted state, from parts with one job each.

- the settings (`facts.VerifySettings`) and the baseline's facts (`facts.BaselineFacts`, frozen,
  measured once by `baseline.measure`), and the time budgets they imply (`facts.Budgets`);
- the validators of its copy of the project (`tools.Tools`);
- the test-impact index (`impact.TestImpact`: coverage, imports, recent failures);
- which edits may be verified at all (`guard.EditPolicy`);
- the plan (`plan.Plan`), built from the registry of stages: static (with its repair,
  `repairs.SafeFixes`), targeted, settled, then the gate. Stages get a `stages.Context` of those
  parts, never the verifier; a lane's verifier (`sibling`) is built from the same parts.

An accepted candidate costs one suite run and the first fixed test; a test-selection miss is never
accepted. `detect` (what `ralph bench verify` times on regressing mutants) is syntax + ruff, then the
selected tests in the warm runner, then the type checker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.protocols import Evidence
from ralph.domain.results import StageResult
from ralph.domain.score import Observation, Score
from ralph.domain.verdict import VerifyReport
from ralph.sandboxes.workspace import empty_dir
from ralph.validators import read_ahead
from ralph.validators.baseline import measure
from ralph.validators.command import CommandValidator
from ralph.validators.coverage import CoverageCache
from ralph.validators.facts import BaselineFacts, Budgets, VerifySettings
from ralph.validators.guard import EditPolicy
from ralph.validators.impact import TestImpact
from ralph.validators.localize import scored_lines
from ralph.validators.plan import STAGES, Entry, Plan, check
from ralph.validators.pytest_run import gate_tests
from ralph.validators.stages import (
    Attempt,
    Context,
    Reset,
    Started,
    Step,
    drop_started,
    run_sequence,
    start_step,
)
from ralph.validators.toolchain import Toolchain
from ralph.validators.tools import Tools


class Verifier:
    """Runs the baseline once, then verifies candidates against the current accepted state."""

    def __init__(
        self,
        toolchain: Toolchain,
        settings: VerifySettings | None = None,
        *,
        registry: Sequence[Entry] = STAGES,
        facts: BaselineFacts | None = None,
        impact: TestImpact | None = None,
    ) -> None:
        self.settings = settings = settings or VerifySettings()
        check(registry)  # (before any validator starts a process)
        self.registry = registry
        self._derived = False  # a lane's verifier or a gate was built from this one's facts
        self.guard = EditPolicy(toolchain, settings)
        self.facts = facts or BaselineFacts(protected=self.guard.protected)
        self.tools = Tools.build(toolchain, settings, self.facts.protected, self.facts)
        self.tools.trust(self.guard.trusted(self.facts.protected), self.facts.harness_known)
        self.impact = (
            impact.copy(toolchain, self.is_test_file) if impact else TestImpact(toolchain, self.is_test_file)
        )
        self.plan = Plan.build(self.tools, settings.background, registry)
        cache = settings.coverage_cache
        self.cache = CoverageCache(cache, toolchain.project, toolchain.python) if cache else None

    def baseline(self, timeout_s: float = 1800.0) -> tuple[Observation, list[StageResult]]:
        """Observe the starting state in full: every test (with coverage), lint, types, checks."""
        measured = measure(self.tools, self.guard, self.cache, self.settings.targets, timeout_s)
        self.facts = measured.facts
        self.impact.measured(measured.coverage)  # (once per state, not inside a candidate's verification)
        # The state's texts read now, before any candidate is applied (the thread learns them later:
        # a file read once the first candidate was written would be learnt as the state's).
        texts = read_ahead.read_now(self.tools.toolchain.project, self.is_test_file)
        read_ahead.start(lambda: texts, self.tools.syntax.learn)
        return measured.observation, measured.stages

    def rebase(self, observation: Observation) -> None:
        """Score against `observation` (a resumed run's original starting state) from now on: before
        any lane or gate is built from this verifier (they share its facts as they were)."""
        if self._derived:
            raise RuntimeError("rebase after a lane or a gate was built from this verifier")
        self.facts = replace(self.facts, observation=observation)

    def sibling(self, toolchain: Toolchain) -> Verifier:
        """A verifier for another copy of the accepted state (a lane candidates are verified on in
        parallel): its own tools, warm worker and type checker on `toolchain`, the same facts (nothing
        is run again) and a copy of the test-impact index."""
        self._derived = True
        return Verifier(
            toolchain, self.settings, registry=self.registry, facts=self.facts, impact=self.impact
        )

    def beside(self, toolchain: Toolchain) -> tuple[Context, tuple[Step, ...], Tools]:
        """What a gate beside the loop runs on `toolchain`'s copy: a context with its own test runner
        and checks (this verifier's facts, a copy of its test-impact index), the gate's steps, and
        those tools. (Its other validators are the loop's: no gate stage uses them.)"""
        self._derived = True
        settings = self.settings
        tools = replace(
            self.tools,
            toolchain=toolchain,
            gate=gate_tests(toolchain, settings.warm, settings.test_timeout_s, settings.gate_workers),
            checks=CommandValidator(toolchain, list(settings.checks), settings.check_paths),
        )
        tools.gate.trusted, tools.gate.known = self.guard.trusted(self.protected), self.facts.harness_known
        impact = self.impact.copy(toolchain, self.is_test_file)
        context = Context(tools, self.facts, self.budgets, impact, settings)
        return context, Plan.gate_for(tools, self.registry), tools

    @property
    def protected(self) -> tuple[str, ...]:
        """What no candidate may edit (the files the baseline's tests read included, once measured)."""
        return self.facts.protected

    @property
    def budgets(self) -> Budgets:
        return Budgets.of(self.facts, self.settings.run_budget_s)

    @property
    def notices(self) -> list[str]:
        """One line per stage that is off for this run (and why), and per tool that is not the
        version the project pins."""
        facts = self.facts
        lines = [
            f"{stage} is off for this run: it cannot run at the baseline: {why}"
            for stage, why in facts.disabled.items()
        ]
        return lines + ([facts.ruff_drift] if facts.ruff_drift else []) + list(facts.unmatched)

    @property
    def semantic(self) -> dict[str, str]:
        """Whether each semantic stage looks, and why (the trace's run_start says it)."""
        tools = self.tools
        api = "on" if tools.api.enabled else f"off: {tools.api.reason_off}"
        formats = (
            f"on: {tools.format.how}"
            if tools.format.enabled
            else "off: the project does not format with ruff"
        )
        off, mode = self.settings.semantic_off, self.settings.plausibility
        ours = {
            code: "off: semantic_off" if code in off else mode
            for code in ("special-case", "deleted-behaviour")
        }
        turned_off = {"semantic_off": ", ".join(sorted(off))} if off else {}
        return {"plausibility": tools.plausibility.mode, **ours, "api": api, "format": formats, **turned_off}

    def is_test_file(self, path: str) -> bool:
        """A file pytest collected tests from at the baseline, or one named like a test file."""
        return self.guard.is_test_file(path, self.facts.test_files)

    def score(self, obs: Observation) -> Score:
        return self._context().score(obs)

    def evidence(self, state: Observation) -> Evidence:
        """What a drafter may see of `state`: the failing tests, diagnostics and checks, and the lines
        most likely at fault; with `only` set (a pre-commit hook's files), only what lies in them."""
        failing = tuple(state.tests[t] for t in state.failing_tests())
        scored = scored_lines(failing, self.impact.coverage, state.passing_tests(), self.protected)
        only = self.settings.only
        scored = [s for s in scored if only is None or s[0] in only]
        return Evidence(
            failing_tests=failing,
            diagnostics=tuple(
                d for ds in state.diagnostics.values() for d in ds if only is None or d.path in only
            ),
            failing_checks=tuple(c for c, r in state.checks.items() if not r.passed),
            suspicious=tuple((path, line) for path, line, _ in scored),
            suspicion=tuple(score for _, _, score in scored),
        )

    def verify(
        self,
        candidate: Candidate,
        current: Observation,
        reset: Reset | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> VerifyReport:
        """Verify a candidate already applied to the workspace against the `current` state. `reset`
        puts the workspace back to exactly the accepted state plus the given changes (whatever the
        candidate's tests wrote is gone): it is called before the gate."""
        report = self._run(self.plan.sequence, candidate, current, reset, "", progress)
        if report.accepted:
            report.gated = not self.settings.background
            self.adopt(report.changes or candidate.changes)
        return report

    def detect(self, candidate: Candidate, current: Observation) -> VerifyReport:
        """The staged checks a regressing candidate meets before the gate (what benchmarks measure):
        syntax, lint, types and the selected tests. Accepted = not caught without the full suite."""
        passed = "no regression found by the staged checks"
        return self._run(self.plan.detection, candidate, current, None, passed)

    def policy(self, candidate: Candidate) -> str | None:
        """Why the candidate may not be verified at all, or None."""
        return self.guard.refusal(candidate, self.facts)

    def adopt(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` are part of the state now (this verifier's, or another lane's)."""
        self.impact.adopt(changes)
        files = [
            (c.path, c.after)
            for c in changes
            if c.after and c.path.endswith(".py") and not self.is_test_file(c.path)
        ]
        if files:
            read_ahead.start(lambda: files, self.tools.syntax.learn)

    def reverted(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` were taken out of the accepted state (their background gate failed)."""
        self.impact.reverted(changes)

    def restored(self, foreign: bool) -> None:
        """The workspace was put back; `foreign`: it had to undo what a candidate's tests wrote
        outside the edit, which nothing configured meanwhile may have seen."""
        if self.tools.warm is not None:  # the child readied ahead is forked now, on a clean state only
            self.tools.warm.restored(clean=not foreign)
        self.impact.restored()

    def close(self) -> None:
        """Stop the warm runners (and anything they still run) and the type checker."""
        self.tools.close()

    def _context(self, tools: Tools | None = None) -> Context:
        return Context(tools or self.tools, self.facts, self.budgets, self.impact, self.settings)

    def _run(
        self,
        steps: tuple[Step, ...],
        candidate: Candidate,
        current: Observation,
        reset: Reset | None,
        passed: str,
        progress: Callable[[str], None] | None = None,
    ) -> VerifyReport:
        start = time.perf_counter()
        scratch = self.tools.toolchain.scratch
        first: Started | None = None
        try:
            self.impact.graph()  # read the sources now, before any of the candidate's code has run
            attempt = Attempt(self._context(), candidate, current, reset, progress=progress)
            # The first step's own processes (ruff: they read the edit, never run it) start before the
            # policy reads the edit, whose time their wait then hides.
            first = start_step(steps[0], attempt) if steps and steps[0].before is None else None
            if reason := self.policy(candidate):
                report = VerifyReport(False, reason, failed_stage="policy")
            else:
                broken, attempt = run_sequence(steps, attempt, first)
                report = broken or attempt.report(
                    True, passed or f"remaining error {attempt.before} -> {attempt.remaining}"
                )
                if report.accepted and attempt.amended:
                    report.changes = attempt.candidate.changes
        finally:
            if first is not None:  # (started ahead and not taken: refused, or an error on the way)
                drop_started(first)
            if scratch is not None:  # whatever the candidate's processes left there
                empty_dir(scratch)
        report.duration_ms = (time.perf_counter() - start) * 1000
        return report
