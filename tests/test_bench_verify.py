"""`ralph bench verify` on a small real project: both paths are timed, the fix of every caught mutant
is accepted, and what an accept costs is counted in suite units."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import BUGGY_WINDOWS, run_ralph, write_files

PROJECT = {
    **BUGGY_WINDOWS,
    "windows.py": BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)"),
    "other.py": "def triple(x):\n    return x * 3\n",
    "tests/test_other.py": (
        "from other import triple\n\n\n"
        + "".join(f"def test_triple_{n}():\n    assert triple({n}) == {3 * n}\n\n\n" for n in range(6))
    ),
}


def _bench_verify(project: Path, *more: str) -> dict:
    """`ralph bench verify` on three caught mutants of `project`, through the real entry point."""
    proc = run_ralph(
        "bench",
        "verify",
        str(project),
        "--mutants",
        "3",
        "--python",
        sys.executable,
        "--json",
        *more,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    if more:
        assert "the rejection path, part by part" in proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_bench_verify_times_the_reject_and_the_accept_path(tmp_path: Path) -> None:
    write_files(tmp_path / "p", PROJECT)
    summary = _bench_verify(tmp_path / "p", "--profile")
    assert summary["mutants"] == 3 and summary["recall"] == 1.0
    assert summary["accept_median_ms"] > 0 and summary["fixes_rejected"] == []
    # Where the rejections' time went, part by part: the shares add up to the whole.
    profile = summary["rejection_profile"]
    assert {"apply", "syntax", "ruff", "start", "collection", "tests", "host", "restore"} <= set(profile)
    assert abs(sum(p["share"] for p in profile.values()) - 1) < 0.01, profile
    assert all(p["median_ms"] >= 0 for name, p in profile.items() if name != "other"), profile
    # An accept costs one suite run and the first fixed test (9 of 8 here), not the two and a half
    # suites it once did.
    assert 0 < summary["accept_suite_units_max"] <= 1.25, summary


@pytest.mark.slow
def test_a_test_that_fails_unmutated_catches_no_mutant(tmp_path: Path) -> None:
    """A suite with a test the copy cannot pass fails whatever the mutant: only a test that fails
    besides it catches one, so a mutant of untested code is no caught mutant the staged checks missed."""
    untested = "".join(f"def f{n}(a, b):\n    return (a + {n}) * (b - {n}) < a // 3\n\n\n" for n in range(8))
    files = {
        **PROJECT,
        "untested.py": untested,
        "tests/test_broken.py": "def test_broken():\n    assert False\n",
    }
    write_files(tmp_path / "p", files)
    summary = _bench_verify(tmp_path / "p")
    assert summary["mutants"] == 3 and summary["recall"] == 1.0, summary["missed"]
