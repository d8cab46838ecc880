"""Staged verification: cheapest stage first, stop at the first that shows a regression.

syntax -> ruff -> mypy -> targeted tests + failing checks -> (only for an improving candidate) the full
suite and every check as a regression gate, so a test-selection miss can never be accepted.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ralph.candidate import PROTECTED_TESTS, Candidate, FileChange, is_protected, unified_diff
from ralph.errors import RalphError
from ralph.protocols import Scope
from ralph.score import Observation, Score, is_under, regressions, score
from sandboxes.workspace import empty_dir, read_text_beneath
from validators.command import CommandValidator
from validators.mypy import MypyValidator, plugin_files
from validators.policy import PYTEST_CONFIG_FILES, config_edits, harness_reach, shadowing
from validators.pytest_run import PytestValidator
from validators.report import StageResult, TestResult
from validators.ruff import RuffValidator
from validators.selection import (
    CoverageIndex,
    CoverageMap,
    ImportGraph,
    Selection,
    project_sources,
    select_tests,
)
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
    # The edit as verified when the verifier amended it (ruff's safe fixes applied): what to commit.
    changes: tuple[FileChange, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "accepted" if self.accepted else "rejected",
            "reason": self.reason,
            "failed_stage": self.failed_stage,
            "verify_ms": round(self.duration_ms, 1),
            "score": self.score.to_json() if self.score else None,
            "stages": [s.to_json() for s in self.stages],
            **({"amended_diff": unified_diff(self.changes)} if self.changes is not None else {}),
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
        coverage_cache: Path | None = None,
        protected: tuple[str, ...] = PROTECTED_TESTS,
        warm: bool = True,
        only: tuple[str, ...] | None = None,
        test_timeout_s: float = 60.0,
    ) -> None:
        self.toolchain = toolchain
        self.cache_dir = coverage_cache
        self.targets = targets
        self.protected = protected
        self.only = only  # when set, edits outside these files are refused
        self.plugin_files = plugin_files(toolchain.project)  # type-checker plugins: never edited
        # The workspace is ours: the bytecode of a compiled candidate can serve the tests' imports.
        self.syntax = SyntaxValidator(toolchain, write_bytecode=toolchain.reads_our_bytecode)
        self.ruff = RuffValidator(toolchain)
        self.mypy = MypyValidator(toolchain) if types else None
        self.warm = WarmRunner(toolchain, third_party_imports(toolchain.project)) if warm else None
        self.tests = PytestValidator(toolchain, warm=self.warm, test_timeout_s=test_timeout_s)
        # The gate runs in a fresh process (never a fork of the warm worker a candidate's tests ran
        # beside), on a workspace put back to exactly the accepted state plus the candidate.
        self.gate = PytestValidator(toolchain, name="gate", warm=None, test_timeout_s=test_timeout_s)
        self.checks = CommandValidator(toolchain, checks)
        self.coverage: CoverageMap = {}
        self.test_files: set[str] = set()  # files the baseline collected tests from
        self._import_graph: ImportGraph | None = None
        self._coverage_index: CoverageIndex | None = None
        # Tests the selected-test stage saw fail lately: run first, as pytest's --failed-first does,
        # since the next candidate is most often broken the same way.
        self.recent_failures: dict[str, None] = {}
        self.durations: dict[str, float] = {}  # each test's time at the baseline
        self.suite_s = 60.0
        self.types_s = 0.0  # what the type checker took at the baseline (its first, full check)
        self.baseline_obs = Observation()
        # Stages that could not run at the baseline (the user's own config is broken, say), with why:
        # they are off for the run, said at the start and in the trace, never silently passed.
        self.disabled: dict[str, str] = {}
        self._ruff_drift: str | None = None

    def baseline(self, timeout_s: float = 1800.0) -> tuple[Observation, list[StageResult]]:
        """Observe the starting state in full: every test (with coverage), lint, types, checks."""
        cache = self.cache_dir / f"coverage-{self._content_key()}.json" if self.cache_dir else None
        cached = _load_json(cache) if cache else None
        stages: list[StageResult] = [self.tests.baseline(timeout_s, coverage=cached is None)]
        self.coverage = cached if cached is not None else self.tests.last_coverage
        if cache and cached is None and self.coverage:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(self.coverage))
        # What a healthy run takes: tests that hit the per-test limit (a buggy loop) do not count, or
        # every candidate would get their minutes too.
        hung = sum(t.duration_s for t in stages[0].tests if "per-test limit" in t.message)
        self.suite_s = max(0.0, stages[0].duration_ms / 1000 - hung)
        self.test_files = {t.nodeid.split("::")[0] for t in stages[0].tests}
        self.durations = {t.nodeid: t.duration_s for t in stages[0].tests}
        self._check_targets(stages[0])
        stages.append(self.ruff.check(Scope(timeout_s=timeout_s)))
        if self.mypy:
            stages.append(self.mypy.check(Scope(timeout_s=timeout_s)))
            self.types_s = stages[-1].duration_ms / 1000
        if self.checks.commands:
            stages.append(self.checks.check(Scope(timeout_s=timeout_s)))
        for stage in stages[1:]:
            if stage.error is not None:
                self.disabled[stage.stage] = stage.error.splitlines()[0][:300] if stage.error else "failed"
        if "ruff" in self.disabled:
            self.ruff.enabled = False
        self._ruff_drift = self.ruff.drift()
        if "mypy" in self.disabled:
            self._close_mypy()
        obs = Observation()
        for stage in stages:
            if stage.error is None:
                obs = obs.overlay(stage)
        self.baseline_obs = obs
        self._graph()  # once per state, not inside the first candidate's verification
        self._index()
        return obs, stages

    def _check_targets(self, suite: StageResult) -> None:
        """Every `--tests` target names something the baseline collected: a typo is bad input, not a
        goal reached with the intended tests never run."""
        if self.targets is None:
            return
        ids = [t.nodeid for t in suite.tests]
        missing = [t for t in sorted(self.targets) if not any(is_under(i, t) for i in ids)]
        if missing:
            raise RalphError(
                f"--tests {', '.join(missing)}: no such test in the suite (pytest collected "
                f"{len(ids)} tests; give node ids as `pytest --collect-only -q` prints them)"
            )

    @property
    def notices(self) -> list[str]:
        """One line per stage that is off for this run (and why), and per tool that is not the
        version the project pins."""
        lines = [
            f"{stage} is off for this run: it cannot run at the baseline: {why}"
            for stage, why in self.disabled.items()
        ]
        return lines + ([self._ruff_drift] if self._ruff_drift else [])

    @property
    def quick_timeout_s(self) -> float:
        """For the targeted stages: a few times what the whole suite took at the baseline. A mutant that
        loops forever should cost seconds, not minutes (seen: 20 s a candidate on a 0.3 s suite)."""
        return min(120.0, max(5.0, 3 * self.suite_s + 2))

    @property
    def types_timeout_s(self) -> float:
        """The type checker's limit per candidate: its incremental recheck is fast, but after a
        restart it checks everything again, which must not be a timeout (a timeout fails the stage)."""
        return max(self.quick_timeout_s, 3 * self.types_s + 10)

    def is_test_file(self, path: str) -> bool:
        """A file pytest collected tests from at the baseline, or one named like a test file."""
        return path in self.test_files or is_protected(path, PROTECTED_TESTS)

    def _content_key(self) -> str:
        """What the coverage map depends on: every Python file and test config of the project, and
        the interpreter; unrelated changes (environment variables, other files) keep the cache."""
        digest = hashlib.sha256(f"{self.toolchain.python}\0{sys.version}\0".encode())
        project = self.toolchain.project
        for file in sorted(project.rglob("*")):
            rel = file.relative_to(project)
            if any(p.startswith(".") or p == "__pycache__" for p in rel.parts) or not file.is_file():
                continue
            if file.suffix in (".py", ".pyi") or file.name in PYTEST_CONFIG_FILES:
                digest.update(rel.as_posix().encode() + b"\0" + hashlib.sha256(file.read_bytes()).digest())
        return digest.hexdigest()[:24]

    def restored(self, foreign: bool) -> None:
        """The workspace was put back; `foreign`: it had to undo what a candidate's tests wrote
        outside the edit, which nothing configured meanwhile may have seen."""
        if foreign and self.warm is not None:
            self.warm.discard_spare()

    def close(self) -> None:
        """Stop the warm runner (and anything it still runs) and the type checker."""
        if self.warm is not None:
            self.warm.close()
        self._close_mypy()

    def _close_mypy(self) -> None:
        if self.mypy is not None:
            self.mypy.close()
            self.mypy = None

    def score(self, obs: Observation) -> Score:
        return score(self.baseline_obs, obs, self.targets, frozenset(self.only or ()))

    def verify(self, candidate: Candidate, current: Observation, reset: Reset | None = None) -> VerifyReport:
        """Verify a candidate already applied to the workspace against the `current` state. `reset`
        puts the workspace back to exactly the accepted state plus the given changes (whatever the
        candidate's tests wrote is gone): it is called before the gate."""
        start = time.perf_counter()
        try:
            report = self._verify(candidate, current, reset)
        finally:
            if self.toolchain.scratch is not None:  # whatever the candidate's processes left there
                empty_dir(self.toolchain.scratch)
        report.duration_ms = (time.perf_counter() - start) * 1000
        if report.accepted:
            self.coverage = remap_coverage(self.coverage, report.changes or candidate.changes)
            self._import_graph = None
        return report

    def policy(self, candidate: Candidate) -> VerifyReport | None:
        """What the candidate may not change, before anything runs: tests, verification settings,
        files outside `only`, the test harness."""
        paths = tuple(candidate.paths)
        protected = [p for p in paths if is_protected(p, self.protected)]
        if protected:
            return VerifyReport(
                False, f"edits to tests are not allowed: {', '.join(protected)}", failed_stage="policy"
            )
        if configs := config_edits(candidate.changes, self.plugin_files):
            return VerifyReport(
                False,
                f"edits to how the project is checked are not allowed: {', '.join(configs)}",
                failed_stage="policy",
            )
        outside = [p for p in paths if self.only is not None and p not in self.only]
        if outside:
            return VerifyReport(
                False, f"only {', '.join(self.only or ())} may be edited", failed_stage="policy"
            )
        if shadows := shadowing(candidate.changes):
            return VerifyReport(
                False,
                f"new modules named like the standard library or the test harness are not allowed: {', '.join(shadows)}",
                failed_stage="policy",
            )
        if reach := harness_reach(candidate.changes):
            more = f" (+{len(reach) - 3} more)" if len(reach) > 3 else ""
            return VerifyReport(
                False,
                "the edit reaches into the test harness (pytest's or ralph's internals), which no fix "
                f"needs: {'; '.join(reach[:3])}{more}",
                failed_stage="policy",
            )
        return None

    def _verify(self, candidate: Candidate, current: Observation, reset: Reset | None) -> VerifyReport:
        if refused := self.policy(candidate):
            return refused
        self._graph()  # read the sources now, before any of the candidate's code has run
        paths = tuple(candidate.paths)
        run = _Stages(self, current)
        before = self.score(current).remaining
        quick = self.quick_timeout_s
        # Cheapest first: syntax, lint; then the tests that failed (can it improve at all?) while
        # the type checker runs beside them.
        if broken := self._static(run, paths):
            fixed = self._safe_fixes(run, candidate, current)
            if fixed is None:
                return broken
            candidate, run = fixed  # judged as ruff's safe fixes leave it, and committed so
            paths = tuple(candidate.paths)
        failing = tuple(current.failing_tests())
        failing_checks = [c for c, r in current.checks.items() if not r.passed]
        concurrent = []
        if failing:
            concurrent.append(lambda: self.tests.check(Scope(tests=failing, timeout_s=quick)))
        if failing_checks:
            concurrent.append(lambda: self.checks.check(Scope(timeout_s=quick), failing_checks))
        if mypy := self.mypy:
            concurrent.append(lambda: mypy.check(Scope(paths=paths, timeout_s=self.types_timeout_s)))
        if broken := run.concurrently(concurrent):
            return broken
        if self.score(run.merged).remaining >= before:
            return run.report(False, "no improvement on the targeted checks")
        # It improves: make sure it breaks nothing the change can reach, failing fast.
        selection = self.selection(candidate, current)
        if broken := run.stage(lambda: self._selected(selection, quick)):
            return broken
        if reset is not None:
            reset(candidate.changes)
            # The type checker read the files while the candidate's tests ran beside it (and could
            # rewrite them): its verdict that counts is on the restored state.
            if self.mypy is not None:
                checker, limit = self.mypy, self.types_timeout_s
                if broken := run.stage(lambda: checker.check(Scope(paths=paths, timeout_s=limit))):
                    return broken
        report = self._gate(run, before)
        if report.accepted and run.amended:
            report.changes = candidate.changes
        return report

    def detect(self, candidate: Candidate, current: Observation) -> VerifyReport:
        """The staged checks a regressing candidate meets before the gate (what benchmarks measure):
        syntax, lint, types and the selected tests. Rejected = caught without the full suite."""
        start = time.perf_counter()
        if refused := self.policy(candidate):
            refused.duration_ms = (time.perf_counter() - start) * 1000
            return refused
        run = _Stages(self, current)
        paths = tuple(candidate.paths)
        quick = self.quick_timeout_s
        broken = self._static(run, paths)
        if not broken:
            selection = self.selection(candidate, current)
            concurrent = [lambda: self._selected(selection, quick)]
            if mypy := self.mypy:
                concurrent.append(lambda: mypy.check(Scope(paths=paths, timeout_s=self.types_timeout_s)))
            broken = run.concurrently(concurrent)
        report = broken or run.report(True, "no regression found by the staged checks")
        report.duration_ms = (time.perf_counter() - start) * 1000
        return report

    def _static(self, run: _Stages, paths: tuple[str, ...]) -> VerifyReport | None:
        """Syntax, then lint on the changed files: milliseconds, so always first. ruff's process is
        started, then the compile runs here while it works (a thread for either was slower on one
        module or another: the compile holds the interpreter). A syntax error is reported first."""
        lint = self.ruff.start(Scope(paths=paths))
        try:
            syntax = self.syntax.check(Scope(paths=paths))
        finally:
            findings = lint()  # waited for (and its files closed) whatever the compile did
        return run.merge([syntax, findings])

    def _safe_fixes(
        self, run: _Stages, candidate: Candidate, current: Observation
    ) -> tuple[Candidate, _Stages] | None:
        """When the static stages' only objections are new ruff diagnostics that ruff fixes safely,
        the candidate with those fixes applied (in the workspace too) and its static stages re-run
        clean; else None."""
        new = run.merged.diagnostic_keys() - current.diagnostic_keys()
        fixable = {d.key for ds in run.merged.diagnostics.values() for d in ds if d.fixable}
        if not new or run.merged.syntax_errors != current.syntax_errors or set(new) - fixable:
            return None
        if any(s.error is not None for s in run.stages) or not self.ruff.enabled:
            return None
        paths = [p for p in candidate.paths if p.endswith((".py", ".pyi"))]
        codes = sorted({k[2] for k in new})
        if not self.ruff.fix_only(paths, codes):
            return None
        changes = []
        for change in candidate.changes:
            if change.path not in paths or change.after is None:
                changes.append(change)
                continue
            after = read_text_beneath(self.toolchain.project, change.path)
            if after is None:
                return None
            changes.append(FileChange(change.path, change.before, after))
        amended = replace(candidate, changes=tuple(changes))
        fixed = _Stages(self, current)
        fixed.stages = [
            *run.stages,
            StageResult(
                "ruff-fix",
                ok=True,
                duration_ms=0.0,
                detail="applied ruff's safe fixes: " + ", ".join(codes),
            ),
        ]
        fixed.amended = True
        if self._static(fixed, tuple(amended.paths)):
            return None
        return amended, fixed

    def selection(self, candidate: Candidate, current: Observation) -> Selection:
        graph = self._graph()
        selection = select_tests(candidate.changes, self._index(), graph, self.is_test_file)
        if selection.everything:
            selection.tests = []
        return selection

    def _selected(self, selection: Selection, timeout_s: float) -> StageResult:
        if not selection.tests and not selection.everything:
            return StageResult(
                "tests", ok=True, duration_ms=0.0, skipped=True, detail="no test can see the change"
            )
        tests = None if selection.everything else tuple(selection.tests)
        scope = Scope(tests=tests, timeout_s=timeout_s)
        # A slow test (one that starts a process, say) is a poor first probe, however recent.
        recent = [t for t in reversed(self.recent_failures) if self.durations.get(t, 0.0) < _PROBE_S]
        result = self.tests.check(scope, exitfirst=True, failed_first=recent, words=selection.words)
        for test in result.tests:
            if test.failing:  # most recent last
                self.recent_failures.pop(test.nodeid, None)
                self.recent_failures[test.nodeid] = None
        while len(self.recent_failures) > _FAILED_FIRST:
            del self.recent_failures[next(iter(self.recent_failures))]
        result.detail += (
            f" ({len(selection.tests) if tests else 'all'} selected: "
            + "; ".join(selection.reasons[:5])
            + ")"
        )
        return result

    def _index(self) -> CoverageIndex:
        if self._coverage_index is None or self._coverage_index.source is not self.coverage:
            self._coverage_index = CoverageIndex(self.coverage)
        return self._coverage_index

    def _graph(self) -> ImportGraph:
        if self._import_graph is None:
            self._import_graph = ImportGraph(project_sources(self.toolchain.project))
        return self._import_graph

    def _gate(self, run: _Stages, before: int) -> VerifyReport:
        timeout = max(30.0, 3 * self.suite_s + 30)
        suite = self.gate.check(Scope(timeout_s=timeout))
        if suite.error is not None:
            run.stages.append(suite)
            return run.report(False, f"gate: no verdict: {suite.error}", failed_stage="gate")
        reported = {t.nodeid for t in suite.tests}
        # Any test of the state that the full suite no longer reports, failing ones included (a
        # failing target that vanished is not fixed).
        suite.tests += [
            TestResult(t, "error", message="disappeared from the suite")
            for t in sorted(set(run.current.tests) - reported)
        ]
        run.stages.append(suite)
        merged = run.merged
        run.merged = Observation(
            {t.nodeid: t for t in suite.tests}, merged.diagnostics, merged.checks, merged.syntax_errors
        )
        if broken := run.check_regressions(suite):
            broken.failed_stage = "gate"
            return broken
        if self.checks.commands and (
            broken := run.stage(lambda: self.checks.check(Scope(timeout_s=timeout)))
        ):
            return broken
        if self.score(run.merged).remaining >= before:
            return run.report(False, "no improvement on the full suite", failed_stage="gate")
        return run.report(True, f"remaining error {before} -> {self.score(run.merged).remaining}")


class _Stages:
    """The stages run so far for one candidate and the observation they add up to."""

    def __init__(self, verifier: Verifier, current: Observation) -> None:
        self.verifier = verifier
        self.current = current
        self.merged = current
        self.stages: list[StageResult] = []
        self.amended = False  # the candidate was changed by ruff's safe fixes

    def report(self, accepted: bool, reason: str, failed_stage: str | None = None) -> VerifyReport:
        score = self.verifier.score(self.merged)
        return VerifyReport(accepted, reason, self.stages, self.merged, score, failed_stage=failed_stage)

    def check_regressions(self, stage: StageResult) -> VerifyReport | None:
        broken = regressions(self.current, self.merged)
        if not broken:
            return None
        more = f" (+{len(broken) - 3} more)" if len(broken) > 3 else ""
        reason = f"{stage.stage}: breaks " + "; ".join(broken[:3]) + more
        return self.report(False, reason, failed_stage=stage.stage)

    def stage(self, run: Callable[[], StageResult]) -> VerifyReport | None:
        return self.concurrently([run])

    def concurrently(self, runs: Sequence[Callable[[], StageResult]]) -> VerifyReport | None:
        """Run stages (in threads when several), merge them, and report the first regression."""
        if not runs:
            return None
        if len(runs) == 1:
            results = [runs[0]()]
        else:
            with ThreadPoolExecutor(max_workers=len(runs)) as pool:
                results = list(pool.map(lambda r: r(), runs))
        return self.merge(results)

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
            broken = broken or self.check_regressions(result)
        return broken


Reset = Callable[[Sequence[FileChange]], object]
_FAILED_FIRST = 20
_PROBE_S = 0.05


def _load_json(path: Path) -> CoverageMap | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remap_coverage(coverage: CoverageMap, changes: tuple[FileChange, ...]) -> CoverageMap:
    """Coverage with line numbers moved to where an accepted edit put them; a covered line inside a
    replaced region marks the whole new region as covered (conservative for test selection)."""
    maps = {c.path: _LineMap(c) for c in changes if c.before is not None and c.after is not None}
    if not maps:
        return coverage
    remapped: CoverageMap = {}
    for test, files in coverage.items():
        remapped[test] = {
            path: sorted({n for line in lines for n in maps[path](line)}) if path in maps else lines
            for path, lines in files.items()
        }
    return remapped


class _LineMap:
    """Old line number -> new line numbers for one edit. The lines the edit kept before and after
    its changed region map by offset; only that region is diffed, so an accepted one-line edit in a
    120,000-line module costs a prefix/suffix scan, not a whole-file diff."""

    def __init__(self, change: FileChange) -> None:
        before = (change.before or "").splitlines()
        after = (change.after or "").splitlines()
        limit = min(len(before), len(after))
        head = 0
        while head < limit and before[head] == after[head]:
            head += 1
        tail = 0
        while tail < limit - head and before[-1 - tail] == after[-1 - tail]:
            tail += 1
        self.head, self.old_end, self.delta = head, len(before) - tail, len(after) - len(before)
        self.middle: dict[int, tuple[int, ...]] = {}
        old, new = before[head : len(before) - tail], after[head : len(after) - tail]
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
            for k, i in enumerate(range(i1, i2)):
                span = (head + j1 + k + 1,) if tag == "equal" else tuple(range(head + j1 + 1, head + j2 + 1))
                self.middle[head + i + 1] = span

    def __call__(self, line: int) -> tuple[int, ...]:
        if line <= self.head:
            return (line,)
        if line > self.old_end:
            return (line + self.delta,)
        return self.middle.get(line, ())
