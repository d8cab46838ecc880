"""Fault localization (pure): where the failing tests point, ranked most suspicious first."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from ralph.domain.candidate import is_protected
from ralph.domain.results import TestResult


def _in_project(path: str, protected: Sequence[str]) -> bool:
    # A frame's path comes from the test process: `pkg/../../../root/x.py` is not in the project.
    parts = path.replace("\\", "/").split("/")
    return not (path.startswith("/") or ".." in parts or not path or is_protected(path, protected))


# A traceback frame's score: above any Ochiai score (at most 1), as a frame is where the fault showed.
FRAME_SCORE = 2.0


def suspicious_lines(
    failing: Sequence[TestResult],
    coverage: Mapping[str, Mapping[str, Sequence[int]]],
    passing: Iterable[str],
    protected: Sequence[str],
    limit: int = 60,
) -> list[tuple[str, int]]:
    """(path, line) pairs outside test files, most suspicious first (see `scored_lines`)."""
    return [(path, line) for path, line, _ in scored_lines(failing, coverage, passing, protected, limit)]


def scored_lines(
    failing: Sequence[TestResult],
    coverage: Mapping[str, Mapping[str, Sequence[int]]],
    passing: Iterable[str],
    protected: Sequence[str],
    limit: int = 60,
) -> list[tuple[str, int, float]]:
    """(path, line, score) outside test files: traceback frames first (innermost first, scored
    `FRAME_SCORE`), then lines ranked by Ochiai suspiciousness over per-test coverage (executed by
    failing tests, not by passing)."""
    ranked: dict[tuple[str, int], float] = {}
    for test in failing:
        for path, line, _func in reversed(test.frames):
            if _in_project(path, protected):
                ranked.setdefault((path, line), FRAME_SCORE)
    failed_ids = {t.nodeid for t in failing}
    passed_ids = set(passing)
    # Each file once: the tests share files, and the protected globs can be a thousand (the files a
    # suite reads), which took seconds an iteration when asked again for every test's every file.
    inside: dict[str, bool] = {}
    executed_by_failing: dict[tuple[str, int], int] = {}
    executed_by_passing: dict[tuple[str, int], int] = {}
    for nodeid, files in coverage.items():
        counter = (
            executed_by_failing
            if nodeid in failed_ids
            else executed_by_passing
            if nodeid in passed_ids
            else None
        )
        if counter is None:
            continue
        for path, lines in files.items():
            if path not in inside:
                inside[path] = _in_project(path, protected)
            if not inside[path]:
                continue
            for line in lines:
                counter[(path, line)] = counter.get((path, line), 0) + 1
    total_failed = max(1, len(failed_ids))

    def ochiai(key: tuple[str, int]) -> float:
        ef = executed_by_failing[key]
        return ef / math.sqrt(total_failed * (ef + executed_by_passing.get(key, 0)))

    by_score = sorted(executed_by_failing, key=lambda k: (-ochiai(k), k[0], -k[1]))
    for key in by_score:
        ranked.setdefault(key, round(ochiai(key), 6))
    return [(path, line, score) for (path, line), score in list(ranked.items())[:limit]]
