"""Reports from traces: r per drafter (hand-computed and simulated), run breakdowns, JSON, CSV, plot."""

from __future__ import annotations

import csv
import json
import random

import pytest

from ralph.report import drafter_stats, report_json, run_stats
from ralph.trace import TraceWriter
from ralph.trace_reader import parse_run
from tests.conftest import run_ralph


def iteration(i, drafter, before, after, draft_ms=100.0, verify_ms=300.0, elapsed=None):
    return {
        "type": "iteration",
        "schema": 1,
        "i": i,
        "drafter": drafter,
        "remaining_before": before,
        "remaining_after": after,
        "draft_ms": draft_ms,
        "verify_ms": verify_ms,
        "overhead_ms": 100.0,
        "elapsed_s": elapsed if elapsed is not None else 0.5 * i,
        "candidates": [{"cost_usd": 0.01 if drafter == "deep" else None}],
    }


HAND = [
    {
        "type": "run_start",
        "schema": 1,
        "run_id": "r1",
        "drafters": {"fast": "X"},
        "baseline": {"remaining": 4},
    },
    iteration(1, "fast", 4, 4),
    iteration(2, "fast", 4, 3),
    iteration(3, "fast", 3, 3),
    iteration(4, "deep", 3, 1, draft_ms=5000.0),
    iteration(5, "fast", 1, 0),
    {"type": "run_end", "schema": 1, "outcome": "goal", "wall_s": 10.0, "remaining": 0, "cost_usd": 0.01},
]


def test_r_is_error_removed_over_error_faced_per_drafter():
    stats = drafter_stats([parse_run(HAND)])
    assert stats["fast"].error_seen == 4 + 4 + 3 + 1 and stats["fast"].error_removed == 2
    assert stats["fast"].r == pytest.approx(2 / 12)
    assert stats["deep"].r == pytest.approx(2 / 3)
    assert stats["deep"].median_cycle_s == pytest.approx(5.4)
    assert stats["deep"].predicted_fixed(2) == pytest.approx(1 - (1 / 3) ** 2)


def test_run_breakdown_time_to_green_and_escalations():
    run = run_stats(parse_run(HAND))
    assert (run.outcome, run.iterations, run.accepted, run.escalations) == ("goal", 5, 3, 1)
    assert run.time_to_green_s == pytest.approx(2.5)
    assert run.draft_s == pytest.approx(5.4) and run.verify_s == pytest.approx(1.5)
    assert run.fractions["draft"] == pytest.approx(0.54)


def simulated_run(r: float, errors: int, rng: random.Random) -> list[dict]:
    """Each remaining error is fixed independently with probability r per iteration."""
    records, remaining, i = [], errors, 0
    while remaining and i < 200:
        i += 1
        fixed = sum(rng.random() < r for _ in range(remaining))
        records.append(iteration(i, "sim", remaining, remaining - fixed))
        remaining -= fixed
    return records


@pytest.mark.parametrize("true_r", [0.2, 0.65])
def test_r_recovers_the_rate_of_simulated_runs(true_r):
    rng = random.Random(7)
    runs = [simulated_run(true_r, 20, rng) for _ in range(60)]
    assert drafter_stats([parse_run(r) for r in runs])["sim"].r == pytest.approx(true_r, abs=0.03)


def test_a_killed_run_is_reported_unfinished():
    assert run_stats(parse_run(HAND[:-1])).outcome == "unfinished"


def write_trace(path, records):
    writer = TraceWriter(path)
    for r in records:
        writer.write(r["type"], **{k: v for k, v in r.items() if k not in ("type", "schema")})
    writer.close()


def test_report_command_json_csv_and_plot(tmp_path):
    pytest.importorskip("matplotlib")  # the `plot` extra
    trace = tmp_path / "runs" / "r1" / "trace.jsonl"
    write_trace(trace, HAND)
    csv_file, png = tmp_path / "it.csv", tmp_path / "plot.png"
    proc = run_ralph("report", str(tmp_path / "runs"), "--json", "--csv", str(csv_file), "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["runs"][0]["outcome"] == "goal"
    assert {"r", "iterations", "accepted"} <= data["drafters"]["fast"].keys()
    rows = list(csv.DictReader(csv_file.open()))
    assert [r["drafter"] for r in rows] == ["fast", "fast", "fast", "deep", "fast"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def of_repo(records, repo, project, task):
    """`records` as a run of `repo` (its `project` folder in it) with `task`."""
    start = {**records[0], "repo": repo, "project": project, "task": task}
    return [start, *records[1:]]


def test_report_names_each_runs_repository_and_task(tmp_path):
    write_trace(tmp_path / "runs" / "r1" / "trace.jsonl", of_repo(HAND, "/home/me/shop", "api", "fix totals"))
    write_trace(tmp_path / "runs" / "r2" / "trace.jsonl", of_repo(HAND, "/home/me/blog", ".", ""))
    proc = run_ralph("report", str(tmp_path / "runs"), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if "outcome" in line)
    assert [c.strip() for c in header.strip("┃│ ").split("┃")][:3] == ["run", "repo", "task"]
    rows = [line for line in proc.stdout.splitlines() if "goal" in line]
    assert "shop/api" in rows[0] and "fix totals" in rows[0]
    assert "blog" in rows[1] and "blog/." not in rows[1]
    data = json.loads(run_ralph("report", str(tmp_path / "runs"), "--json").stdout)
    assert [(r["repo"], r["task"]) for r in data["runs"]] == [("shop/api", "fix totals"), ("blog", "")]


@pytest.mark.parametrize("runs", [1, 12])
def test_the_plots_legend_lies_outside_both_plots(runs):
    pytest.importorskip("matplotlib")
    from ralph.plot import figure

    traced = [parse_run(of_repo(HAND, f"/src/repo{n}", ".", "a task " * 8), f"t{n}") for n in range(runs)]
    fig = figure(traced)
    fig.canvas.draw()
    [legend] = fig.legends
    assert len(legend.get_texts()) == runs
    box = legend.get_window_extent()
    assert all(not box.overlaps(axes.get_window_extent()) for axes in fig.axes)


def test_compare_groups_runs_by_their_drafters(tmp_path):
    other = [r if r["type"] != "iteration" else {**r, "drafter": "solo"} for r in HAND]
    data = report_json(
        [parse_run(HAND, str(tmp_path / "a")), parse_run(other, str(tmp_path / "b"))], compare=True
    )
    assert set(data["drafters"]) == {"fast+deep", "solo"}


def test_report_of_nothing_is_a_one_line_error(tmp_path):
    proc = run_ralph("report", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "no such trace file" in proc.stderr


def test_progress_counts_a_state_once_its_gate_passed():
    records = [
        {"type": "run_start"},
        {
            "type": "iteration",
            "i": 1,
            "remaining_before": 3,
            "remaining_after": 2,
            "accepted": True,
            "elapsed_s": 1.0,
        },
        {
            "type": "iteration",
            "i": 2,
            "remaining_before": 2,
            "remaining_after": 1,
            "accepted": True,
            "state": 2,
            "elapsed_s": 2.0,
        },
        {
            "type": "iteration",
            "i": 3,
            "remaining_before": 1,
            "remaining_after": 0,
            "accepted": True,
            "state": 3,
            "elapsed_s": 3.0,
        },
        {"type": "gate", "iteration": 2, "verdict": "passed", "remaining": 1, "elapsed_s": 3.5},
        {"type": "gate", "iteration": 3, "verdict": "rejected", "remaining": 1, "elapsed_s": 4.0},
    ]
    run = parse_run(records)
    steps, times = list(run.steps), list(run.times)
    assert steps == [3, 2, 2, 1]  # the provisional accepts count when (and if) their gate passes
    assert times == [(0.0, 3), (1.0, 2), (2.0, 2), (3.0, 2), (3.5, 1)]


def test_a_directory_of_trace_files_is_read_as_a_bench_writes_it(tmp_path):
    """`ralph bench fix` writes `traces/TASK.jsonl`: `ralph report --compare traces/` reads them."""
    from ralph.report import trace_files

    (tmp_path / "traces").mkdir()
    for name in ("a", "b"):
        (tmp_path / "traces" / f"{name}.jsonl").write_text("{}\n")
    assert [p.name for p in trace_files([tmp_path / "traces"])] == ["a.jsonl", "b.jsonl"]
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "trace.jsonl").write_text("{}\n")
    assert [p.parent.name for p in trace_files([tmp_path / "runs"])] == ["r1"]
