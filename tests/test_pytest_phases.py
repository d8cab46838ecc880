"""Where a test run's time went, from the closing record's clock: informative only, and nothing at all
when the clock is missing or out of order (the candidate's process wrote it)."""

from __future__ import annotations

from ralph.validators.pytest_run import phases


def test_a_runs_time_splits_into_start_collection_tests_and_the_hosts_side() -> None:
    sent = 1000.0
    parts = phases({"clock": [1000.010, 1000.030, 1000.080]}, sent, elapsed_ms=100.0)
    assert parts == {"start": 10.0, "collection": 20.0, "tests": 50.0, "host": 20.0}


def test_a_spare_childs_session_started_before_the_request_costs_no_start() -> None:
    parts = phases({"clock": [999.5, 1000.020, 1000.050]}, 1000.0, elapsed_ms=60.0)
    assert parts == {"start": 0.0, "collection": 20.0, "tests": 30.0, "host": 10.0}


def test_a_missing_or_impossible_clock_gives_no_phases() -> None:
    assert phases(None, 1000.0, 50.0) == {}
    assert phases({"clock": "soon"}, 1000.0, 50.0) == {}
    assert phases({"clock": [1000.0, 999.0, 1000.01]}, 1000.0, 50.0) == {}  # collected before it started
    assert phases({"clock": [1000.0, 1000.01, 1000.2]}, 1000.0, 50.0) == {}  # longer than the run
