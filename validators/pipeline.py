"""Staged verification: cheapest stage first, stop at the first that shows a regression.

policy -> syntax + ruff (+ the project's format) -> the failing tests that can see the change, until
one passes, and the failing checks, beside mypy (must improve) -> (workspace put back) mypy again,
beside the plausibility and API checks -> the whole suite in a fresh pytest child as the gate (of
a worker with nothing but pytest imported), stopping at the first regression, and every check
(must improve). A test-selection miss is never accepted, and an accepted candidate costs one suite
run and the first fixed test. `detection` (what `ralph bench verify`
times on regressing mutants) is syntax + ruff, then the selected tests in the warm runner beside
mypy. The steps are declared in `Verifier._steps`; validators/stages.py holds the stages and runner.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path

from ralph.domain.candidate import PROTECTED_TESTS, Candidate, FileChange, is_protected, undoing
from ralph.domain.errors import RalphError, UnsafePath
from ralph.domain.protocols import Evidence
from ralph.domain.results import Scope, StageResult
from ralph.domain.score import Observation, Score, is_under, score
from ralph.domain.verdict import VerifyReport
from ralph.sandboxes.workspace import (
    empty_dir,
    encode_like,
    read_text_beneath,
    stat_and_read_beneath,
    write_beneath,
)
from ralph.validators.api import ApiValidator
from ralph.validators.command import CommandValidator
from ralph.validators.coverage import CoverageCache, remap_coverage
from ralph.validators.failed_first import RecentFailures
from ralph.validators.format import FormatValidator, formats_with_ruff
from ralph.validators.localize import scored_lines
from ralph.validators.mypy import MypyValidator, plugin_files
from ralph.validators.plausibility import PlausibilityValidator
from ralph.validators.policy import (
    allowed_rules,
    broad_python_files,
    check_scripts,
    collected_files,
    git_ignored,
    info_exclude,
    interpreter_prefix,
    literal_glob,
    named_by_tests,
    project_tests,
    read_by_tests,
    refusal,
)
from ralph.validators.pytest_run import PytestValidator, gate_tests
from ralph.validators.ruff import RuffValidator
from ralph.validators.selection import (
    CoverageIndex,
    CoverageMap,
    ImportGraph,
    Selection,
    project_sources,
    select_tests,
)
from ralph.validators.stages import (
    FORMAT_FIX,
    RUFF_FIX,
    AllChecksStage,
    ApiStage,
    Attempt,
    FailingChecksStage,
    FailingTestsStage,
    FormatStage,
    GateStage,
    LintStage,
    PlausibilityStage,
    Reset,
    SelectedTestsStage,
    Step,
    SyntaxStage,
    TypesStage,
    put_back,
    run_sequence,
    run_step,
)
from ralph.validators.syntax import SyntaxValidator
from ralph.validators.toolchain import Toolchain
from ralph.validators.warm import candidates_runner

# The coverage map's entry for the files the baseline's run read (our plugin's record, kept with the
# coverage it was measured with): not a test.
OPENED = "<opened>"
# In the same record: the project's modules pytest loaded as plugins, the files it collected test
# functions from, and those it ran doctests of.
PLUGINS, TESTS, DOCTESTS = "<plugins>", "<tests>", "<doctests>"
# Tests in the first round of a large fail-fast selection (see `Verifier.run_selected`).
FIRST_ROUND = 16


def _after(first: StageResult, rest: StageResult) -> StageResult:
    """A second round's result, with the first round's passing tests and time before it."""
    rest.tests = [*first.tests, *rest.tests]
    rest.duration_ms += first.duration_ms
    rest.detail += f" (after a first round of {len(first.tests)} passing)"
    return rest


def _policy(
    toolchain: Toolchain, protected: tuple[str, ...], allow: Collection[str] | None
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """What the project's tests are (PROTECTED_TESTS and what its pytest settings say); what no
    candidate may edit (those, unless test edits are allowed: `protected` empty); the policy's rules
    the project allows (`allow`, else its `[tool.ralph] allow`); the interpreter's prefix when it
    lies inside the project."""
    tests = (*PROTECTED_TESTS, *project_tests(toolchain.project, toolchain.root))
    protected = tuple(dict.fromkeys((*protected, *tests))) if protected else ()
    allowed = tuple(allow) if allow is not None else allowed_rules(toolchain.project)
    return tests, protected, allowed, interpreter_prefix(toolchain.python, toolchain.project)


class Verifier:
    """Runs the baseline once, then verifies candidates against the current accepted state."""

    # What the baseline's run changed in pytest's machinery, as the project's own (PytestValidator.known).
    harness_known: frozenset[tuple[str, str]] = frozenset()

    _ruff_drift: str | None = None  # set at the baseline: ruff is not the version the project pins

    def __init__(
        self,
        toolchain: Toolchain,
        *,
        checks: list[str],
        check_paths: dict[str, list[str]] | None = None,
        targets: frozenset[str] | None,
        types: bool,
        coverage_cache: Path | None = None,
        protected: tuple[str, ...] = PROTECTED_TESTS,
        warm: bool = True,
        only: tuple[str, ...] | None = None,
        test_timeout_s: float = 60.0,
        background: bool = False,
        plausibility: str = "reject",
        api_changes: bool = False,
        formatting: bool = True,
        run_budget_s: float | None = None,
        allow: Collection[str] | None = None,
    ) -> None:
        self.toolchain = toolchain
        self.run_budget_s = run_budget_s  # --max-seconds: a candidate that hangs takes a tenth of it
        self.background = background  # gate beside the loop: `verify` ends after the targeted stages
        cache = CoverageCache(coverage_cache, toolchain.project, toolchain.python) if coverage_cache else None
        self.cache = cache
        self.targets = targets
        # What the policy judges by (`_policy`); the files the tests read join `protected` at the baseline.
        self.test_globs, self.protected, self.allow, self.installed = _policy(toolchain, protected, allow)
        self.only = only  # when set, edits outside these files are refused
        # Type-checker plugins and the scripts the checks run decide verdicts: never edited.
        self.plugin_files = plugin_files(toolchain.project) + check_scripts(toolchain.project, checks)
        # The workspace is ours: the bytecode of a compiled candidate can serve the tests' imports.
        self.syntax = SyntaxValidator(toolchain, write_bytecode=toolchain.reads_our_bytecode)
        self.ruff = RuffValidator(toolchain)
        self.plausibility = PlausibilityValidator(toolchain, self.ruff.binary, plausibility)
        self.api = ApiValidator(toolchain.project, allowed=api_changes)
        formats = formats_with_ruff(toolchain.project, checks) if formatting else None
        self.format = FormatValidator(toolchain, self.ruff.binary, formats)
        self.mypy = MypyValidator(toolchain) if types else None
        self.warm = candidates_runner(toolchain, self.protected) if warm else None
        self.tests = PytestValidator(toolchain, warm=self.warm, test_timeout_s=test_timeout_s)
        self.gate = gate_tests(toolchain, warm, test_timeout_s)
        self._trust()
        self.checks, self.coverage = CommandValidator(toolchain, checks, check_paths), CoverageMap()
        self.accepted_paths: set[str] = set()  # files accepted edits changed since the coverage was measured
        # The files the baseline collected tests from; the modules (and text files) it ran doctests of.
        self.test_files, self.doctest_files = set[str](), set[str]()
        self._import_graph: ImportGraph | None = None
        self._coverage_index: CoverageIndex | None = None
        self.recent_failures = RecentFailures()
        self.durations: dict[str, float] = {}  # each test's time at the baseline
        # The suite's time at the baseline, its slowest test that did not hit the per-test limit, and
        # what the type checker took then (its first, full check).
        self.suite_s, self.healthy_s, self.types_s = 60.0, 0.0, 0.0
        self.baseline_obs = Observation()
        # Stages that could not run at the baseline (the user's own config is broken, say), with why:
        # they are off for the run, said at the start and in the trace, never silently passed.
        self.disabled: dict[str, str] = {}
        self._unmatched: list[str] = []  # declared check paths that match no file
        self.static, self.sequence, self.detection = self._steps()

    def _steps(self) -> tuple[Step, tuple[Step, ...], tuple[Step, ...]]:
        """The static step; the order a candidate meets the stages in (each step runs only if the
        ones before it passed); and what a regressing candidate meets before the gate (what `ralph
        bench verify` times)."""
        # Formatting is last: a candidate it rejects is formatted by the repair, never rejected for it.
        checks = (SyntaxStage(self.syntax), LintStage(self.ruff))
        static = Step((*checks, FormatStage(self.format)))
        # Only for a candidate that improves (beside the second type check): one the static stages or
        # the targeted tests reject, the rejection path, never pays for them.
        semantic = (PlausibilityStage(self.plausibility), ApiStage(self.api))
        sequence: tuple[Step, ...] = (
            replace(static, repair=self._safe_fixes),
            Step(
                (
                    FailingTestsStage(self.tests, self),
                    FailingChecksStage(self.checks, self),
                    TypesStage(self),
                ),
                must_improve="no improvement on the targeted checks",
            ),
            Step((TypesStage(self, settled=True), *semantic), before=put_back),
            *self.gate_steps(self.gate, self.checks),
        )
        if self.background:
            sequence = sequence[:-2]
        # A regressing mutant is rejected, never formatted: the detection has no format stage.
        detection = (Step(checks), Step((SelectedTestsStage(self),)), Step((TypesStage(self, settled=True),)))
        return static, sequence, detection

    def gate_steps(self, tests: PytestValidator, checks: CommandValidator) -> tuple[Step, Step]:
        """The gate: the whole suite, then every check on the state put back (must improve)."""
        return (
            Step((GateStage(tests, self),)),
            Step(
                (AllChecksStage(checks, self),),
                before=put_back,  # what the gate's tests wrote is gone before the checks run
                must_improve="no improvement on the full suite",
                blame="gate",
            ),
        )

    def baseline(self, timeout_s: float = 1800.0) -> tuple[Observation, list[StageResult]]:
        """Observe the starting state in full: every test (with coverage), lint, types, checks."""
        cached = self.cache.load() if self.cache else None
        if cached is not None and DOCTESTS not in cached:  # measured before the plugin recorded these
            cached = None
        suite = self.tests.baseline(timeout_s, coverage=cached is None)
        self.harness_known = self.tests.last_changes  # (a pytest plugin's repository: its own)
        coverage = cached if cached is not None else self.tests.last_coverage
        if self.cache and cached is None and coverage:
            self.cache.store(coverage)
        coverage = dict(coverage)
        opened: dict[str, object] = dict(coverage.pop(OPENED, {}))
        plugins = [p for p in coverage.pop(PLUGINS, {}) if not p.startswith(("/", "../"))]
        tests, self.doctest_files = list(coverage.pop(TESTS, {})), set(coverage.pop(DOCTESTS, {}))
        self.coverage = coverage
        # What a healthy run takes: tests that hit the per-test limit (a buggy loop) do not count, or
        # every candidate would get their minutes too.
        hung = sum(t.duration_s for t in suite.tests if "per-test limit" in t.message)
        self.suite_s = max(0.0, suite.duration_ms / 1000 - hung)
        self.healthy_s = max(
            (t.duration_s for t in suite.tests if "per-test limit" not in t.message), default=0.0
        )
        self.test_files = {t.nodeid.split("::")[0] for t in suite.tests}
        self.durations = {t.nodeid: t.duration_s for t in suite.tests}
        if self.protected:  # what the tests read is theirs: a candidate that edits it edits a test
            project, root = self.toolchain.project, self.toolchain.root
            theirs = [
                *collected_files(tests, self.doctest_files, broad_python_files(project, root)),
                *read_by_tests(opened, project, self.is_test_file),
                *named_by_tests(project, self.test_files),
                *plugins,
            ]
            self.protected = tuple(dict.fromkeys((*self.protected, *(literal_glob(p) for p in theirs))))
        self._trust()
        self._check_targets(suite)
        stages = [suite, self.ruff.check(Scope(timeout_s=timeout_s))]
        if self.mypy:
            stages.append(self.mypy.check(Scope(timeout_s=timeout_s)))
            self.types_s = stages[-1].duration_ms / 1000
        if self.checks.commands:
            stages.append(self.checks.check(Scope(timeout_s=timeout_s)))
        self._disable_broken(stages[1:])
        obs = Observation()
        for stage in stages:
            if stage.error is None:
                obs = obs.overlay(stage)
        self.baseline_obs = obs
        self._graph()  # once per state, not inside the first candidate's verification
        self._index()
        return obs, stages

    def _disable_broken(self, stages: list[StageResult]) -> None:
        """A static stage or check that cannot run at the baseline is off for the run, and said so."""
        for stage in stages:
            if stage.error is not None:
                self.disabled[stage.stage] = stage.error.splitlines()[0][:300] if stage.error else "failed"
        if "ruff" in self.disabled:
            self.ruff.enabled = False
        if why := self.format.probe():  # the project's format settings are broken: not ours to fix
            self.disabled["format"] = why.splitlines()[0][:300]
            self.format.how = None
        self._ruff_drift = self.ruff.drift()
        self._unmatched = self.checks.unmatched(self.toolchain.project)
        if "mypy" in self.disabled:
            self._close_mypy()

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
        return lines + ([self._ruff_drift] if self._ruff_drift else []) + self._unmatched

    @property
    def semantic(self) -> dict[str, str]:
        """Whether each semantic stage looks, and why (the trace's run_start says it)."""
        api = "on" if self.api.enabled else f"off: {self.api.reason_off}"
        formats = (
            f"on: {self.format.how}" if self.format.enabled else "off: the project does not format with ruff"
        )
        return {"plausibility": self.plausibility.mode, "api": api, "format": formats}

    @property
    def hang_limit_s(self) -> float:
        """One test's limit in the targeted stage: ten times the slowest test of the baseline that did
        not hang, at least 2 s. A candidate whose loop never ends (one the baseline had, or one the
        edit made) is cut there, not at the project's own limit; one that ends it finishes like a
        healthy test (a fix whose test legitimately runs longer than that is lost: the price of not
        waiting minutes on every hopeless candidate; the gate keeps the project's limit)."""
        return min(self.quick_timeout_s, max(2.0, 10 * self.healthy_s))

    @property
    def hang_timeout_s(self) -> float:
        """The targeted stage's whole limit when every test it runs hung at the baseline: its usual
        one, but no more than a fair share of the run's time (a tenth of --max-seconds, never under
        one test's hang limit), so hanging candidates cannot use up the budget between them."""
        if self.run_budget_s is None:
            return self.quick_timeout_s
        return min(self.quick_timeout_s, max(self.hang_limit_s, self.run_budget_s / 10))

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

    @property
    def gate_timeout_s(self) -> float:
        return max(30.0, 3 * self.suite_s + 30)

    @property
    def trusted(self) -> tuple[str, ...] | None:
        """Whose changes to pytest's machinery are the project's own: its tests as the policy protects
        them (None, everyone's, where the project allows the harness rule)."""
        return None if "harness" in self.allow else (self.protected or (*PROTECTED_TESTS, *self.test_globs))

    def _trust(self) -> None:
        self.tests.trusted = self.gate.trusted = self.trusted
        self.tests.known = self.gate.known = self.harness_known

    def is_test_file(self, path: str) -> bool:
        """A file pytest collected tests from at the baseline, or one named like a test file."""
        return path in self.test_files or is_protected(path, self.test_globs)

    def restored(self, foreign: bool) -> None:
        """The workspace was put back; `foreign`: it had to undo what a candidate's tests wrote
        outside the edit, which nothing configured meanwhile may have seen."""
        if self.warm is not None:  # the child readied ahead is forked now, on a clean state only
            self.warm.restored(clean=not foreign)
        if self._import_graph is None:  # an accepted edit changed the sources: read them now, from
            self._graph()  # the state put back, not inside the next candidate's verification

    def close(self) -> None:
        """Stop the warm runners (and anything they still run) and the type checker."""
        for runner in (self.warm, self.gate.warm):
            if runner is not None:
                runner.close()
        self._close_mypy()

    def _close_mypy(self) -> None:
        if self.mypy is not None:
            self.mypy.close()
            self.mypy = None

    def score(self, obs: Observation) -> Score:
        return score(self.baseline_obs, obs, self.targets, frozenset(self.only or ()))

    def evidence(self, state: Observation) -> Evidence:
        """What a drafter may see of `state`: the failing tests, diagnostics and checks, and the lines
        most likely at fault; with `only` set (a pre-commit hook's files), only what lies in them."""
        failing = tuple(state.tests[t] for t in state.failing_tests())
        scored = scored_lines(failing, self.coverage, state.passing_tests(), self.protected)
        only = self.only
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
        report = self._run(self.sequence, candidate, current, reset, "", progress)
        if report.accepted:
            report.gated = not self.background
            self.adopt(report.changes or candidate.changes)
        return report

    def adopt(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` are part of the state now (this verifier's, or another lane's): the
        coverage's lines move with them, and the sources are read again once the state is put back."""
        self.coverage = remap_coverage(self.coverage, tuple(changes))
        self.accepted_paths.update(c.path for c in changes)
        self._import_graph = None

    def sibling(self, toolchain: Toolchain) -> Verifier:
        """A verifier for another copy of the accepted state (a lane candidates are verified on in
        parallel): its own tools, warm worker and type checker on `toolchain`, what the baseline
        observed shared (nothing is run again)."""
        other = Verifier(
            toolchain,
            checks=self.checks.commands,
            check_paths={c: list(g) for c, g in self.checks.paths.items()},
            targets=self.targets,
            types=self.mypy is not None,
            protected=self.protected,
            warm=self.warm is not None,
            only=self.only,
            test_timeout_s=self.tests.test_timeout_s,
            background=self.background,
            plausibility=self.plausibility.mode,
            api_changes=self.api.allowed,
            formatting=self.format.enabled,
            run_budget_s=self.run_budget_s,
            allow=self.allow,
        )
        names = ("coverage", "durations", "suite_s", "healthy_s", "types_s", "test_files", "doctest_files")
        for name in (*names, "harness_known", "baseline_obs"):
            setattr(other, name, getattr(self, name))
        other._trust()
        other.accepted_paths = set(self.accepted_paths)
        other.disabled, other._ruff_drift = dict(self.disabled), self._ruff_drift
        other.ruff.enabled = self.ruff.enabled
        other.format.how = self.format.how
        return other

    def reverted(self, changes: Sequence[FileChange]) -> None:
        """Accepted `changes` were taken out of the accepted state (their background gate failed):
        the coverage's lines map back, and the sources are read again. The files stay in
        `accepted_paths` (coverage measured before them vouches for nothing there)."""
        self.coverage = remap_coverage(self.coverage, undoing(changes))
        self._import_graph = None
        self._graph()

    def detect(self, candidate: Candidate, current: Observation) -> VerifyReport:
        """The staged checks a regressing candidate meets before the gate (what benchmarks measure):
        syntax, lint, types and the selected tests. Accepted = not caught without the full suite."""
        return self._run(self.detection, candidate, current, None, "no regression found by the staged checks")

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
        try:
            if reason := self.policy(candidate):
                report = VerifyReport(False, reason, failed_stage="policy")
            else:
                self._graph()  # read the sources now, before any of the candidate's code has run
                attempt = Attempt(self, candidate, current, reset, progress=progress)
                broken, attempt = run_sequence(steps, attempt)
                report = broken or attempt.report(
                    True, passed or f"remaining error {attempt.before} -> {attempt.remaining}"
                )
                if report.accepted and attempt.amended:
                    report.changes = attempt.candidate.changes
        finally:
            if self.toolchain.scratch is not None:  # whatever the candidate's processes left there
                empty_dir(self.toolchain.scratch)
        report.duration_ms = (time.perf_counter() - start) * 1000
        return report

    def policy(self, candidate: Candidate) -> str | None:
        """Why the candidate may not be verified at all, or None."""
        return refusal(
            candidate.changes,
            self.protected,
            self.only,
            self.plugin_files,
            tests=self.test_globs,
            allow=self.allow,
            installed=self.installed,
            ignored=self._ignored,
            doctests=self.doctest_files,
        )

    @functools.cached_property
    def _excludes(self) -> str:
        """The user's repository's `.git/info/exclude` (the copy has no `.git/info` of its own)."""
        return info_exclude(self.toolchain.user_root)

    def _ignored(self, paths: Sequence[str]) -> list[str]:
        """Which of these project paths git ignores, asked in the repository's copy (whose
        `.gitignore` files no candidate may edit)."""
        root, project = self.toolchain.root or self.toolchain.project, self.toolchain.project
        if not project.is_relative_to(root):
            root = project
        prefix = "" if root == project else project.relative_to(root).as_posix() + "/"
        ignored = set(git_ignored(root, [prefix + p for p in paths], self._excludes))
        return [p for p in paths if prefix + p in ignored]

    def _safe_fixes(self, attempt: Attempt) -> Attempt | None:
        """When the static stages' only objections are new diagnostics that are fixed safely (ruff's
        safe fixes, then the project's format of what they made), the attempt with them applied (in
        the workspace too) and its static stages re-run clean; else None."""
        for _round in ("ruff", "format"):
            amended = self._amend(attempt)
            if amended is None:
                return None
            attempt = amended
            if run_step(self.static, attempt) is None:
                return attempt
        return None

    def _amend(self, attempt: Attempt) -> Attempt | None:
        """The attempt with its new fixable diagnostics fixed: ruff's first, else the format's."""
        merged, current = attempt.merged, attempt.current
        new = merged.diagnostic_keys() - current.diagnostic_keys()
        fixable = {d.key for ds in merged.diagnostics.values() for d in ds if d.fixable}
        if not new or merged.syntax_errors != current.syntax_errors or set(new) - fixable:
            return None
        if any(s.error is not None for s in attempt.stages):
            return None
        paths = [p for p in attempt.paths if p.endswith((".py", ".pyi"))]
        codes = sorted({k[2] for k in new if k[0] != self.format.name})
        if codes:
            if not self.ruff.enabled or not self.ruff.fix_only(paths, codes):
                return None
            stage, note = RUFF_FIX, "applied ruff's safe fixes: " + ", ".join(codes)
        else:
            if not self._write_formatted(attempt.candidate.changes, {k[1] for k in new}):
                return None
            stage, note = FORMAT_FIX, f"formatted as the project formats ({self.format.how})"
        changes = []
        for change in attempt.candidate.changes:
            if change.path not in paths or change.after is None:
                changes.append(change)
                continue
            after = read_text_beneath(self.toolchain.project, change.path)
            if after is None:
                return None
            changes.append(FileChange(change.path, change.before, after))
        candidate = replace(attempt.candidate, changes=tuple(changes))
        fixed = Attempt(self, candidate, current, attempt.reset, progress=attempt.progress)
        fixed.stages = [*attempt.stages, StageResult(stage, ok=True, duration_ms=0.0, detail=note)]
        fixed.amended = True
        return fixed

    def _write_formatted(self, changes: Sequence[FileChange], paths: set[str]) -> bool:
        """Write the format stage's text of each of `paths` into the workspace (through no link, in
        the file's own line endings); False when one is missing or the file is not the one checked."""
        for change in changes:
            if change.path not in paths:
                continue
            text = self.format.formatted.get((change.path, change.after or ""))
            found = stat_and_read_beneath(self.toolchain.project, change.path)
            if text is None or found is None:
                return False
            try:
                data = encode_like(text, found[1])
            except UnsafePath:
                return False
            write_beneath(self.toolchain.project, change.path, data, mode=found[0].st_mode & 0o7777)
        return True

    def selection(self, candidate: Candidate) -> Selection:
        selection = select_tests(candidate.changes, self._index(), self._graph(), self.is_test_file)
        if selection.everything:
            selection.tests = []
        return selection

    def run_selected(self, selection: Selection) -> StageResult:
        """The tests that can see the change, failing fast, recent failures first (warm). A large
        selection runs in two rounds: the tests likeliest to fail first (`first_round`), alone, and
        only when they all pass, the rest: a broken candidate usually fails in the first, whose run
        collects a module or two instead of every module the selection reaches."""
        if not selection.tests and not selection.everything:
            return StageResult(
                "tests", ok=True, duration_ms=0.0, skipped=True, detail="no test can see the change"
            )
        tests = None if selection.everything else tuple(selection.tests)
        first = self.first_round(selection)
        if first:
            result = self._fail_fast(first, selection)
            if result.error is None and not any(t.failing for t in result.tests):
                ran = set(first)
                rest = self._fail_fast(tuple(t for t in selection.tests if t not in ran), selection)
                result = _after(result, rest)
        else:
            result = self._fail_fast(tests, selection)
        count = len(selection.tests) if tests else "all"
        result.detail += f" ({count} selected: " + "; ".join(selection.reasons[:5]) + ")"
        return result

    def first_round(self, selection: Selection) -> tuple[str, ...]:
        """For a selection of more than 2 x FIRST_ROUND tests: the recent failures it holds and the
        tests that ran a changed line, narrowest first, FIRST_ROUND at most; else none (one round)."""
        if selection.everything or len(selection.tests) <= 2 * FIRST_ROUND or not selection.near:
            return ()
        chosen = set(selection.tests)
        recent = [t for t in self.recent_failures.first(self.durations) if t in chosen]
        return tuple(dict.fromkeys([*recent, *selection.near]))[:FIRST_ROUND]

    def _fail_fast(self, tests: tuple[str, ...] | None, selection: Selection) -> StageResult:
        result = self.tests.check(
            Scope(tests=tests, timeout_s=self.quick_timeout_s),
            exitfirst=True,
            failed_first=self.recent_failures.first(self.durations),
            words=selection.words,
            near=selection.near,
        )
        self.recent_failures.saw(result.tests)
        return result

    def _index(self) -> CoverageIndex:
        if self._coverage_index is None or self._coverage_index.source is not self.coverage:
            self._coverage_index = CoverageIndex(self.coverage)
        return self._coverage_index

    def _graph(self) -> ImportGraph:
        if self._import_graph is None:
            self._import_graph = ImportGraph(project_sources(self.toolchain.project))
        return self._import_graph
