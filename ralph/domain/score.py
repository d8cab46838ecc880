"""The state of a workspace as validators observed it, and the score derived from it (pure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from ralph.domain.results import CheckResult, Diagnostic, StageResult, TestResult


@dataclass(frozen=True)
class Observation:
    """Everything known about one state: test outcomes, diagnostics, checks, syntax errors."""

    tests: dict[str, TestResult] = field(default_factory=dict)
    diagnostics: dict[tuple[str, str], tuple[Diagnostic, ...]] = field(default_factory=dict)
    checks: dict[str, CheckResult] = field(default_factory=dict)
    syntax_errors: dict[str, str] = field(default_factory=dict)

    def overlay(self, stage: StageResult) -> Observation:
        """This observation updated with what `stage` re-observed (its scope replaces ours)."""
        reported = {t.nodeid: t for t in stage.tests}
        tests = reported if stage.complete_tests else {**self.tests, **reported}
        # A module (or directory, "." the root) that failed to collect is one entry, its path; once
        # tests under it report and it does not, it collects again.
        for entry in [t for t in tests if "::" not in t and t not in reported]:
            if any(entry == "." or is_under(r, entry) for r in reported):
                del tests[entry]
        diagnostics = {k: v for k, v in self.diagnostics.items() if k[0] != stage.complete_tool}
        for tool_path in stage.checked:
            diagnostics.pop(tool_path, None)
        for tool_path in stage.checked:
            found = tuple(d for d in stage.diagnostics if (d.tool, d.path) == tool_path)
            if found:
                diagnostics[tool_path] = found
        checks = {**self.checks, **{c.command: c for c in stage.checks}}
        syntax = dict(self.syntax_errors)
        if stage.stage == "syntax":
            for _tool, path in stage.checked:
                syntax.pop(path, None)
            syntax.update(stage.syntax_errors)
        return replace(self, tests=tests, diagnostics=diagnostics, checks=checks, syntax_errors=syntax)

    def diagnostic_keys(self) -> Counter[tuple[str, str, str, str]]:
        return Counter(d.key for ds in self.diagnostics.values() for d in ds)

    def failing_tests(self) -> list[str]:
        return sorted(t for t, r in self.tests.items() if r.failing)

    def passing_tests(self) -> set[str]:
        return {t for t, r in self.tests.items() if r.outcome == "passed"}


@dataclass(frozen=True)
class Score:
    """What stands between a state and the goal. `remaining` is the error the loop drives to zero."""

    failing_targets: tuple[str, ...] = ()
    regressions: tuple[str, ...] = ()  # non-target tests that passed at baseline and fail now
    new_diagnostics: tuple[str, ...] = ()
    failing_checks: tuple[str, ...] = ()
    syntax_errors: tuple[str, ...] = ()

    @property
    def remaining(self) -> int:
        return (
            len(self.failing_targets)
            + len(self.regressions)
            + len(self.new_diagnostics)
            + len(self.failing_checks)
            + len(self.syntax_errors)
        )

    def to_json(self) -> dict[str, object]:
        return {
            "remaining": self.remaining,
            "failing_targets": list(self.failing_targets),
            "regressions": list(self.regressions),
            "new_diagnostics": list(self.new_diagnostics),
            "failing_checks": list(self.failing_checks),
            "syntax_errors": list(self.syntax_errors),
        }


def is_under(nodeid: str, target: str) -> bool:
    """Whether a test node id is `target` or lies under it (a file, a class, a directory)."""
    return nodeid == target or nodeid.startswith((target + "::", target.rstrip("/") + "/"))


def _is_target(nodeid: str, targets: frozenset[str] | None) -> bool:
    """A node id is a target when no targets were given, or it is one of them or lies under one."""
    return targets is None or any(is_under(nodeid, t) for t in targets)


def _unfixed(baseline: Observation, state: Observation) -> list[str]:
    """Tests failing in `state`, and tests that failed at the baseline and now only skip or xfail
    (code under test that skips its own test has fixed nothing)."""
    failing = set(state.failing_tests())
    dodged = {
        t
        for t, r in state.tests.items()
        if r.outcome in _DODGES and (b := baseline.tests.get(t)) is not None and b.failing
    }
    return sorted(failing | dodged)


_DODGES = frozenset({"skipped", "xfailed"})


def score(
    baseline: Observation,
    state: Observation,
    targets: frozenset[str] | None = None,
    strict_paths: frozenset[str] = frozenset(),
) -> Score:
    """Score `state` against the goal: target tests pass, nothing regressed, no new diagnostics (and
    none at all in `strict_paths`: the files a pre-commit hook was given)."""
    failing = _unfixed(baseline, state)
    baseline_passing = baseline.passing_tests()
    known = Counter({k: n for k, n in baseline.diagnostic_keys().items() if k[1] not in strict_paths})
    new_diags = state.diagnostic_keys() - known
    return Score(
        failing_targets=tuple(t for t in failing if _is_target(t, targets)),
        # A non-target that passed at the baseline and now fails, skips or xfails.
        regressions=tuple(
            t
            for t in sorted({*failing, *(t for t, r in state.tests.items() if r.outcome in _DODGES)})
            if not _is_target(t, targets) and t in baseline_passing
        ),
        new_diagnostics=tuple(
            sorted(f"{tool}:{path}: {code} {msg}" for tool, path, code, msg in new_diags.elements())
        ),
        failing_checks=tuple(sorted(c for c, r in state.checks.items() if not r.passed)),
        syntax_errors=tuple(sorted(state.syntax_errors)),
    )


def regressions(current: Observation, candidate: Observation) -> list[str]:
    """Everything `candidate` breaks that was fine in `current`: a test, a check, a new diagnostic.
    Only the tests whose result is not `current`'s own are read (a stage's overlay keeps the rest:
    results are immutable, so the same one is the same outcome): a candidate's merge of a few tests
    into a suite of thousands reads a few."""
    before, after = current.tests, candidate.tests
    changed = sorted(t for t, r in after.items() if before.get(t) is not r)
    passed = [t for t in changed if (r := before.get(t)) is not None and r.outcome == "passed"]
    broken = [f"test {t}" for t in passed if after[t].failing]
    broken += [f"test {t} (now {after[t].outcome})" for t in passed if after[t].outcome in _DODGES]
    broken += [
        f"test {t} (new, failing)"
        for t in changed
        if t not in before and after[t].failing and not uncollected_module(current, t)
    ]
    broken += [f"check {c}" for c, r in current.checks.items() if r.passed and not candidate.checks[c].passed]
    added = candidate.diagnostic_keys() - current.diagnostic_keys()
    broken += [f"{tool} {path}: {code} {msg}" for tool, path, code, msg in sorted(added.elements())]
    broken += [f"syntax {p}" for p in sorted(set(candidate.syntax_errors) - set(current.syntax_errors))]
    return broken


def regressed_tests(current: Observation, candidate: Observation) -> tuple[str, ...]:
    """The tests that passed in `current` and fail, skip or xfail in `candidate`, when that is all
    `candidate` breaks; () when it breaks nothing, or anything else too (a check, a diagnostic, a
    syntax error, a new failing test)."""
    tests = tuple(
        t
        for t in sorted(current.passing_tests())
        if (r := candidate.tests.get(t)) is not None and (r.failing or r.outcome in _DODGES)
    )
    return tests if len(tests) == len(regressions(current, candidate)) else ()


def uncollected_module(state: Observation, nodeid: str) -> bool:
    """Whether `nodeid` lies in a module (or directory) that failed to collect in `state`: one
    failing entry, its path. Its tests are not new there, they could not be seen."""
    return "::" in nodeid and any(
        "::" not in entry and result.failing and (entry == "." or is_under(nodeid, entry))
        for entry, result in state.tests.items()
    )
