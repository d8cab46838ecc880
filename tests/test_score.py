"""Scoring a state (pure): remaining error, regressions, overlays."""

from __future__ import annotations

import random

from ralph.domain.results import CheckResult, Diagnostic, StageResult, TestResult
from ralph.domain.score import Observation, is_under, regressions, score


def obs(passed=(), failed=(), diags=(), checks=None) -> Observation:
    tests = {t: TestResult(t, "passed") for t in passed} | {t: TestResult(t, "failed") for t in failed}
    by_file: dict = {}
    for d in diags:
        by_file.setdefault((d.tool, d.path), []).append(d)
    return Observation(
        tests,
        {k: tuple(v) for k, v in by_file.items()},
        {c: CheckResult(c, ok) for c, ok in (checks or {}).items()},
    )


UNUSED = Diagnostic("ruff", "a.py", 3, "F401", "`os` imported but unused")


def test_remaining_counts_failing_targets_new_diagnostics_and_checks():
    baseline = obs(passed=["t::a"], failed=["t::b"], diags=[UNUSED])
    state = obs(
        passed=[],
        failed=["t::a", "t::b"],
        diags=[UNUSED, Diagnostic("ruff", "a.py", 9, "F841", "unused x")],
        checks={"make lint": False},
    )
    s = score(baseline, state)
    assert s.failing_targets == ("t::a", "t::b")
    assert s.new_diagnostics == ("ruff:a.py: F841 unused x",)
    assert s.failing_checks == ("make lint",)
    assert s.remaining == 4


def test_baseline_diagnostics_do_not_count_even_when_their_line_moves():
    baseline = obs(passed=["t::a"], diags=[UNUSED])
    moved = Diagnostic("ruff", "a.py", 30, "F401", "`os` imported but unused")
    assert score(baseline, obs(passed=["t::a"], diags=[moved])).remaining == 0


def test_narrowed_targets_count_other_baseline_passes_as_regressions():
    baseline = obs(passed=["t::a", "u::c"], failed=["t::b", "u::d"])
    state = obs(failed=["t::b", "u::c", "u::d"], passed=["t::a"])
    s = score(baseline, state, frozenset({"t"}))
    assert s.failing_targets == ("t::b",)
    assert s.regressions == ("u::c",)  # u::d failed at baseline: not a regression, not a target
    assert s.remaining == 2


def test_target_may_name_a_file_or_directory():
    baseline = obs(failed=["tests/test_x.py::test_a", "other/test_y.py::test_b"])
    s = score(baseline, baseline, frozenset({"tests/"}))
    assert s.failing_targets == ("tests/test_x.py::test_a",)


def test_regressions_name_everything_a_candidate_breaks():
    current = obs(passed=["t::a", "t::b"], checks={"lint": True})
    candidate = obs(passed=["t::b"], failed=["t::a"], diags=[UNUSED], checks={"lint": False})
    assert regressions(current, candidate) == [
        "test t::a",
        "check lint",
        "ruff a.py: F401 `os` imported but unused",
    ]


def test_a_new_test_that_fails_is_a_regression():
    current = obs(passed=["t::p[a]"])
    assert regressions(current, obs(passed=["t::p[a]"], failed=["t::p[b]"])) == [
        "test t::p[b] (new, failing)"
    ]


def test_fixing_something_is_not_a_regression():
    current = obs(passed=["t::a"], failed=["t::b"])
    assert regressions(current, obs(passed=["t::a", "t::b"])) == []


def test_overlay_replaces_only_the_scope_a_stage_rechecked():
    current = obs(passed=["t::a", "t::b"], diags=[UNUSED, Diagnostic("ruff", "b.py", 1, "E1", "x")])
    stage = StageResult("ruff", ok=True, duration_ms=1.0, checked=[("ruff", "a.py")])
    stage.tests = [TestResult("t::a", "failed")]
    merged = current.overlay(stage)
    assert ("ruff", "a.py") not in merged.diagnostics
    assert ("ruff", "b.py") in merged.diagnostics
    assert merged.tests["t::a"].failing and not merged.tests["t::b"].failing


def test_a_failing_target_that_now_skips_is_not_fixed_and_a_pass_that_skips_regresses():
    from ralph.domain.results import TestResult
    from ralph.domain.score import Observation, regressions, score

    baseline = Observation({"t::fix": TestResult("t::fix", "failed"), "t::ok": TestResult("t::ok", "passed")})
    dodged = Observation({"t::fix": TestResult("t::fix", "skipped"), "t::ok": TestResult("t::ok", "xfailed")})
    assert score(baseline, dodged, frozenset({"t::fix"})).failing_targets == ("t::fix",)
    assert score(baseline, dodged, frozenset({"t::fix"})).regressions == ("t::ok",)
    assert regressions(baseline, dodged) == ["test t::ok (now xfailed)"]


def test_a_module_that_collects_again_replaces_its_collection_error():
    """A state where tests/test_m.py failed to import has one entry for it; a fix that makes it
    import reports its tests, and that entry goes (or no import fix could ever count as progress)."""
    broken = Observation(
        {"tests/test_m.py": TestResult("tests/test_m.py", "error"), "t::ok": TestResult("t::ok", "passed")}
    )
    fixed = StageResult(
        "tests", ok=True, duration_ms=1.0, tests=[TestResult("tests/test_m.py::test_a", "passed")]
    )
    merged = broken.overlay(fixed)
    assert set(merged.tests) == {"tests/test_m.py::test_a", "t::ok"}
    still = StageResult("tests", ok=False, duration_ms=1.0, tests=[TestResult("tests/test_m.py", "error")])
    assert broken.overlay(still).tests["tests/test_m.py"].failing
    assert score(broken, merged).remaining == 0


def _regressions_read_whole(current: Observation, candidate: Observation) -> list[str]:
    """The tests' part of `regressions` as it reads every test of both states (the reference)."""
    broken = [
        f"test {t}"
        for t in sorted(current.passing_tests())
        if t in candidate.tests and candidate.tests[t].failing
    ]
    broken += [
        f"test {t} (now {candidate.tests[t].outcome})"
        for t in sorted(current.passing_tests())
        if t in candidate.tests and candidate.tests[t].outcome in ("skipped", "xfailed")
    ]
    return broken + [
        f"test {t} (new, failing)"
        for t in candidate.failing_tests()
        if t not in current.tests
        and not any("::" not in e and r.failing and is_under(t, e) for e, r in current.tests.items())
    ]


def test_regressions_read_only_the_changed_tests_and_find_what_reading_all_finds():
    """A stage's overlay keeps every result it did not re-observe (the same object): `regressions`
    reads the rest only, and must find exactly what reading every test finds."""
    rng = random.Random(7)
    outcomes = ["passed", "failed", "error", "skipped", "xfailed", "xpassed"]
    for _ in range(300):
        names = [f"t{rng.randrange(4)}.py::test_{i}" for i in range(rng.randrange(1, 30))]
        names += [f"t{rng.randrange(4)}.py" for _ in range(rng.randrange(2))]  # collection errors
        current = Observation({n: TestResult(n, rng.choice(outcomes)) for n in names})
        candidate = current
        for _step in range(rng.randrange(1, 4)):
            again = [*rng.sample(names, rng.randrange(len(names) + 1)), f"new.py::t{rng.randrange(3)}"]
            stage = StageResult(
                "tests",
                ok=True,
                duration_ms=0.0,
                tests=[TestResult(n, rng.choice(outcomes)) for n in again],
                complete_tests=rng.random() < 0.2,
            )
            candidate = candidate.overlay(stage)
        assert regressions(current, candidate) == _regressions_read_whole(current, candidate)
