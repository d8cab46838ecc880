"""The baseline: the starting state observed in full once (every test with coverage, lint, types,
checks), and the facts a run keeps from it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ralph.domain.errors import RalphError
from ralph.domain.results import Scope, StageResult
from ralph.domain.score import Observation, is_under
from ralph.validators.coverage import CoverageCache
from ralph.validators.facts import BaselineFacts
from ralph.validators.guard import EditPolicy
from ralph.validators.policy import (
    broad_python_files,
    collected_files,
    literal_glob,
    named_by_tests,
    read_by_tests,
)
from ralph.validators.selection import CoverageMap
from ralph.validators.tools import Tools

# The coverage map's entry for the files the baseline's run read (our plugin's record, kept with the
# coverage it was measured with): not a test.
OPENED = "<opened>"
# In the same record: the project's modules pytest loaded as plugins, the files it collected test
# functions from, and those it ran doctests of.
PLUGINS, TESTS, DOCTESTS = "<plugins>", "<tests>", "<doctests>"


@dataclass(frozen=True)
class Measured:
    """What the baseline's run gives: its facts, the per-test coverage, the observation, each stage."""

    facts: BaselineFacts
    coverage: CoverageMap
    observation: Observation
    stages: list[StageResult]


def measure(
    tools: Tools,
    guard: EditPolicy,
    cache: CoverageCache | None,
    targets: frozenset[str] | None,
    timeout_s: float,
) -> Measured:
    """Run the whole suite (with coverage unless the cache has it), then ruff, the type checker and
    the checks; what cannot run at the baseline is off for the run (`BaselineFacts.disabled`)."""
    cached = cache.load() if cache else None
    if cached is not None and DOCTESTS not in cached:  # measured before the plugin recorded these
        cached = None
    suite = tools.tests.baseline(timeout_s, coverage=cached is None, protected=guard.protected)
    known = tools.tests.last_changes  # (a pytest plugin's repository: its own)
    coverage = cached if cached is not None else tools.tests.last_coverage
    if cache and cached is None and coverage:
        cache.store(coverage)
    coverage = dict(coverage)
    opened: dict[str, object] = dict(coverage.pop(OPENED, {}))
    plugins = [p for p in coverage.pop(PLUGINS, {}) if not p.startswith(("/", "../"))]
    tests, doctests = list(coverage.pop(TESTS, {})), frozenset(coverage.pop(DOCTESTS, {}))
    test_files = frozenset(t.nodeid.split("::")[0] for t in suite.tests)
    protected = guard.protected
    if protected:  # what the tests read is theirs: a candidate that edits it edits a test
        project, root = tools.toolchain.project, tools.toolchain.root
        theirs = [
            *collected_files(tests, doctests, broad_python_files(project, root)),
            *read_by_tests(opened, project, lambda path: guard.is_test_file(path, test_files)),
            *named_by_tests(project, test_files),
            *plugins,
        ]
        protected = tuple(dict.fromkeys((*protected, *(literal_glob(p) for p in theirs))))
    tools.trust(guard.trusted(protected), known)
    check_targets(targets, suite)
    types = tools.mypy is not None
    stages = [suite, *_static(tools, timeout_s)]
    obs = Observation()
    for stage in stages:
        if stage.error is None:
            obs = obs.overlay(stage)
    facts = _broken(
        tools,
        stages[1:],
        _timed(suite, stages[2] if types else None),
        observation=obs,
        protected=protected,
        test_files=test_files,
        doctest_files=doctests,
        harness_known=known,
    )
    tools.disable(facts.disabled)
    return Measured(facts, coverage, obs, stages)


def _static(tools: Tools, timeout_s: float) -> list[StageResult]:
    stages = [tools.ruff.check(Scope(timeout_s=timeout_s))]
    if tools.mypy:
        stages.append(tools.mypy.check(Scope(timeout_s=timeout_s)))
    if tools.checks.commands:
        stages.append(tools.checks.check(Scope(timeout_s=timeout_s)))
    return stages


def _timed(suite: StageResult, types: StageResult | None) -> BaselineFacts:
    """What a healthy run takes: tests that hit the per-test limit (a buggy loop) do not count, or
    every candidate would get their minutes too. And the type checker's first, full check."""
    hung = sum(t.duration_s for t in suite.tests if "per-test limit" in t.message)
    return BaselineFacts(
        suite_s=max(0.0, suite.duration_ms / 1000 - hung),
        healthy_s=max((t.duration_s for t in suite.tests if "per-test limit" not in t.message), default=0.0),
        durations={t.nodeid: t.duration_s for t in suite.tests},
        types_s=types.duration_ms / 1000 if types is not None else 0.0,
    )


def _broken(tools: Tools, stages: list[StageResult], facts: BaselineFacts, **more: Any) -> BaselineFacts:
    """`facts` with `more`, and what cannot run at the baseline off for the run, and said so (a
    static stage or check that failed to run; the project's broken format settings)."""
    disabled = {
        stage.stage: stage.error.splitlines()[0][:300] if stage.error else "failed"
        for stage in stages
        if stage.error is not None
    }
    if "ruff" in disabled:
        tools.ruff.enabled = False  # (before the format's probe, which runs ruff)
    if why := tools.format.probe():  # the project's format settings are broken: not ours to fix
        disabled["format"] = why.splitlines()[0][:300]
    unmatched = tuple(tools.checks.unmatched(tools.toolchain.project))
    return replace(facts, disabled=disabled, ruff_drift=tools.ruff.drift(), unmatched=unmatched, **more)


def check_targets(targets: frozenset[str] | None, suite: StageResult) -> None:
    """Every `--tests` target names something the baseline collected: a typo is bad input, not a
    goal reached with the intended tests never run."""
    if targets is None:
        return
    ids = [t.nodeid for t in suite.tests]
    missing = [t for t in sorted(targets) if not any(is_under(i, t) for i in ids)]
    if missing:
        raise RalphError(
            f"--tests {', '.join(missing)}: no such test in the suite (pytest collected "
            f"{len(ids)} tests; give node ids as `pytest --collect-only -q` prints them)"
        )
