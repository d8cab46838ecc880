"""Staged verification: cheapest stage first, stop at the first that shows a regression.

syntax -> ruff -> mypy -> targeted tests + failing checks -> (only for an improving candidate) the full
suite and every check as a regression gate, so a test-selection miss can never be accepted.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph.candidate import PROTECTED_TESTS, Candidate, FileChange, is_protected
from ralph.protocols import Scope
from ralph.score import Observation, Score, regressions, score
from validators.command import CommandValidator
from validators.mypy import MypyValidator
from validators.pytest_run import CoverageMap, PytestValidator
from validators.report import StageResult, TestResult
from validators.ruff import RuffValidator
from validators.syntax import SyntaxValidator
from validators.toolchain import Toolchain
from validators.warm import WarmRunner, third_party_imports


@dataclass
class VerifyReport:
    """The verdict on one candidate, with every stage that ran."""

    accepted: bool
    reason: str
    stages: list[StageResult] = field(default_factory=list)
    observation: Observation | None = None
    score: Score | None = None
    duration_ms: float = 0.0
    failed_stage: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "accepted" if self.accepted else "rejected",
            "reason": self.reason,
            "failed_stage": self.failed_stage,
            "verify_ms": round(self.duration_ms, 1),
            "score": self.score.to_json() if self.score else None,
            "stages": [s.to_json() for s in self.stages],
        }


class Verifier:
    """Runs the baseline once, then verifies candidates against the current accepted state."""

    def __init__(
        self,
        toolchain: Toolchain,
        *,
        checks: list[str],
        targets: frozenset[str] | None,
        types: bool,
        cache_dir: Path,
        protected: tuple[str, ...] = PROTECTED_TESTS,
        warm: bool = True,
    ) -> None:
        self.toolchain = toolchain
        self.targets = targets
        self.protected = protected
        self.syntax = SyntaxValidator(toolchain)
        self.ruff = RuffValidator(toolchain)
        self.mypy = MypyValidator(toolchain, cache_dir / "mypy") if types else None
        self.warm = WarmRunner(toolchain, third_party_imports(toolchain.project)) if warm else None
        self.tests = PytestValidator(toolchain, warm=self.warm)
        self.gate = PytestValidator(toolchain, name="gate", warm=self.warm)
        self.checks = CommandValidator(toolchain, checks)
        self.coverage: CoverageMap = {}
        self.suite_s = 60.0
        self.baseline_obs = Observation()

    def baseline(self, timeout_s: float = 1800.0) -> tuple[Observation, list[StageResult]]:
        """Observe the starting state in full: every test (with coverage), lint, types, checks."""
        stages: list[StageResult] = [self.tests.baseline(timeout_s)]
        self.coverage = self.tests.last_coverage
        self.suite_s = stages[0].duration_ms / 1000
        stages.append(self.ruff.check(Scope(timeout_s=timeout_s)))
        if self.mypy:
            stages.append(self.mypy.check(Scope(timeout_s=timeout_s)))
        if self.checks.commands:
            stages.append(self.checks.check(Scope(timeout_s=timeout_s)))
        obs = Observation()
        for stage in stages:
            obs = obs.overlay(stage)
        self.baseline_obs = obs
        return obs, stages

    def close(self) -> None:
        """Stop the warm runner (and anything it still runs)."""
        if self.warm is not None:
            self.warm.close()

    def score(self, obs: Observation) -> Score:
        return score(self.baseline_obs, obs, self.targets)

    def verify(self, candidate: Candidate, current: Observation) -> VerifyReport:
        """Verify a candidate already applied to the workspace against the `current` state."""
        start = time.perf_counter()
        report = self._verify(candidate, current)
        report.duration_ms = (time.perf_counter() - start) * 1000
        if report.accepted:
            self.coverage = remap_coverage(self.coverage, candidate.changes)
        return report

    def _verify(self, candidate: Candidate, current: Observation) -> VerifyReport:
        paths = tuple(candidate.paths)
        protected = [p for p in paths if is_protected(p, self.protected)]
        if protected:
            return VerifyReport(
                False, f"edits to tests are not allowed: {', '.join(protected)}", failed_stage="policy"
            )
        before = self.score(current).remaining
        merged = current
        stages: list[StageResult] = []
        quick = min(120.0, max(20.0, 2 * self.suite_s + 10))
        cheap = [
            lambda: self.syntax.check(Scope(paths=paths)),
            lambda: self.ruff.check(Scope(paths=paths, timeout_s=quick)),
        ]
        if mypy := self.mypy:
            cheap.append(lambda: mypy.check(Scope(paths=paths, timeout_s=quick)))
        cheap.append(
            lambda: self.tests.check(Scope(tests=self.select_tests(candidate, current), timeout_s=quick))
        )
        failing_checks = [c for c, r in current.checks.items() if not r.passed]
        if failing_checks:
            cheap.append(lambda: self.checks.check(Scope(timeout_s=quick), failing_checks))
        for run_stage in cheap:
            stage = run_stage()
            stages.append(stage)
            merged = merged.overlay(stage)
            broken = regressions(current, merged)
            if broken:
                return VerifyReport(
                    False, _why(broken, stage), stages, merged, self.score(merged), failed_stage=stage.stage
                )
        if self.score(merged).remaining >= before:
            return VerifyReport(
                False, "no improvement on the targeted checks", stages, merged, self.score(merged)
            )
        return self._gate(current, merged, stages, before)

    def _gate(
        self, current: Observation, merged: Observation, stages: list[StageResult], before: int
    ) -> VerifyReport:
        timeout = max(60.0, 3 * self.suite_s + 30)
        suite = self.gate.check(Scope(timeout_s=timeout))
        reported = {t.nodeid for t in suite.tests}
        suite.tests += [
            TestResult(t, "error", message="disappeared from the suite")
            for t in sorted(current.passing_tests() - reported)
        ]
        stages.append(suite)
        gated = Observation(
            {t.nodeid: t for t in suite.tests}, merged.diagnostics, merged.checks, merged.syntax_errors
        )
        final = [self.mypy.check(Scope(timeout_s=timeout))] if self.mypy else []
        if self.checks.commands:
            final.append(self.checks.check(Scope(timeout_s=timeout)))
        for stage in final:
            stages.append(stage)
            gated = gated.overlay(stage)
        broken = regressions(current, gated)
        new_score = self.score(gated)
        if broken:
            return VerifyReport(False, _why(broken, suite), stages, gated, new_score, failed_stage="gate")
        if new_score.remaining >= before:
            return VerifyReport(
                False, "no improvement on the full suite", stages, gated, new_score, failed_stage="gate"
            )
        return VerifyReport(
            True, f"remaining error {before} -> {new_score.remaining}", stages, gated, new_score
        )

    def select_tests(self, candidate: Candidate, current: Observation) -> tuple[str, ...]:
        """The failing tests, then the tests whose baseline coverage touches a changed line."""
        failing = current.failing_tests()
        touched = {c.path: _changed_lines(c) for c in candidate.changes}
        covering = sorted(
            test
            for test, files in self.coverage.items()
            if any(touched.get(path, set()) & set(lines) for path, lines in files.items())
        )
        return tuple(dict.fromkeys([*failing, *covering]))


def remap_coverage(coverage: CoverageMap, changes: tuple[FileChange, ...]) -> CoverageMap:
    """Coverage with line numbers moved to where an accepted edit put them; a covered line inside a
    replaced region marks the whole new region as covered (conservative for test selection)."""
    maps = {c.path: _line_map(c) for c in changes if c.before is not None and c.after is not None}
    if not maps:
        return coverage
    remapped: CoverageMap = {}
    for test, files in coverage.items():
        remapped[test] = {
            path: sorted({n for line in lines for n in maps[path].get(line, ())}) if path in maps else lines
            for path, lines in files.items()
        }
    return remapped


def _line_map(change: FileChange) -> dict[int, tuple[int, ...]]:
    before = (change.before or "").splitlines()
    after = (change.after or "").splitlines()
    mapping: dict[int, tuple[int, ...]] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        for k, old in enumerate(range(i1, i2)):
            mapping[old + 1] = (j1 + k + 1,) if tag == "equal" else tuple(range(j1 + 1, j2 + 1))
    return mapping


def _changed_lines(change: FileChange) -> set[int]:
    """Lines of `before` (1-based) that the change replaces, deletes, or inserts next to."""
    before = (change.before or "").splitlines()
    after = (change.after or "").splitlines()
    lines: set[int] = set()
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag != "equal":
            lines.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return lines


def _why(broken: list[str], stage: StageResult) -> str:
    more = f" (+{len(broken) - 3} more)" if len(broken) > 3 else ""
    return f"{stage.stage}: breaks " + "; ".join(broken[:3]) + more
