"""Fault localization (pure): traceback frames first, then Ochiai over per-test coverage."""

from __future__ import annotations

from ralph.domain.candidate import PROTECTED_TESTS
from ralph.domain.results import TestResult
from ralph.validators.localize import suspicious_lines


def test_traceback_frames_in_source_come_first_innermost_first():
    failing = [
        TestResult(
            "tests/test_a.py::t",
            "failed",
            frames=(("tests/test_a.py", 5, "t"), ("lib.py", 3, "f"), ("lib.py", 9, "g")),
        )
    ]
    assert suspicious_lines(failing, {}, [], PROTECTED_TESTS)[:2] == [("lib.py", 9), ("lib.py", 3)]


def test_lines_only_failing_tests_execute_outrank_shared_lines():
    failing = [TestResult("t::bad", "failed")]
    coverage = {
        "t::bad": {"lib.py": [1, 2, 3], "tests/test_lib.py": [7]},
        "t::good": {"lib.py": [1, 2]},
    }
    ranked = suspicious_lines(failing, coverage, ["t::good"], PROTECTED_TESTS)
    assert ranked[0] == ("lib.py", 3)
    assert set(ranked) == {("lib.py", 1), ("lib.py", 2), ("lib.py", 3)}  # test files never suspected


def test_lines_no_failing_test_ran_are_not_suspicious():
    coverage = {"t::good": {"lib.py": [1]}, "t::bad": {"lib.py": [5]}}
    assert suspicious_lines([TestResult("t::bad", "failed")], coverage, ["t::good"], PROTECTED_TESTS) == [
        ("lib.py", 5)
    ]


def test_each_file_is_judged_once_however_many_tests_ran_it(monkeypatch) -> None:
    """A suite that reads a thousand files protects a thousand globs: asking them again for every
    test's every file cost seconds an iteration (tomlkit), before a drafter was even asked."""
    import ralph.validators.localize as localize

    asked: list[str] = []
    judge = localize._in_project
    monkeypatch.setattr(
        localize, "_in_project", lambda path, protected: asked.append(path) or judge(path, protected)
    )
    coverage = {f"t::{i}": {"a.py": [1, 2], "tests/t.py": [3]} for i in range(50)}
    failing = [TestResult("t::0", "failed")]
    ranked = localize.scored_lines(failing, coverage, [f"t::{i}" for i in range(1, 50)], ("tests/*",))
    assert sorted(asked) == ["a.py", "tests/t.py"]
    assert sorted((p, line) for p, line, _ in ranked) == [("a.py", 1), ("a.py", 2)]
