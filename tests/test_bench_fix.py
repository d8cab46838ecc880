"""`ralph bench fix`: HumanEvalFix-style tasks and directories of projects, one trace per task."""

from __future__ import annotations

import json

import pytest

from ralph.bench.fix import humanevalfix_files, load_tasks, naive_time_to_green, verification_per_candidate_s
from ralph.trace_reader import parse_run
from tests.conftest import run_ralph, write_files

FIXABLE = {
    "task_id": "Demo/0",
    "entry_point": "add_one",
    "prompt": 'def add_one(x):\n    """x plus one."""\n',
    "buggy_solution": "    return x - 1\n",
    "test": "\n\ndef check(add_one):\n    assert add_one(1) == 2\n    assert add_one(-1) == 0\n\ncheck(add_one)\n",
}
UNFIXABLE = {
    **FIXABLE,
    "task_id": "Demo/1",
    "buggy_solution": "    return 42\n",
    "test": "\n\ndef check(add_one):\n    assert add_one(123456) == 123457\n\ncheck(add_one)\n",
}


def test_a_humanevalfix_task_becomes_a_pytest_project():
    files = humanevalfix_files(FIXABLE)
    assert files["solution.py"].endswith("    return x - 1\n")
    assert "check(add_one)\n" not in files["test_solution.py"].split("def test_add_one")[0]
    assert "def test_add_one():\n    check(add_one)" in files["test_solution.py"]


@pytest.mark.slow
def test_bench_fix_runs_every_task_and_summarizes(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(FIXABLE) + "\n" + json.dumps(UNFIXABLE) + "\n")
    proc = run_ralph(
        "bench",
        "fix",
        str(tasks),
        "--out",
        str(tmp_path / "out"),
        "--workers",
        "2",
        "--max-iterations",
        "3",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["tasks"], summary["fixed"], summary["fix_rate"]) == (2, 1, 0.5)
    assert sorted(p.name for p in (tmp_path / "out" / "traces").iterdir()) == ["Demo-0.jsonl", "Demo-1.jsonl"]
    assert summary["drafters"]["mutation"]["iterations"] >= 1
    results = json.loads((tmp_path / "out" / "summary.json").read_text())["results"]
    fixed = next(r for r in results if r["outcome"] == "goal")
    assert fixed["naive_run_s"] > 0 and fixed["naive_ratio"] > 0
    assert summary["naive_ratio_median"] == fixed["naive_ratio"]


def test_the_naive_loop_pays_a_full_run_per_candidate_verified_up_to_the_goal():
    records = [
        {"type": "run_start"},
        {
            "type": "iteration",
            "i": 1,
            "draft_ms": 100.0,
            "remaining_after": 2,
            "candidates": [{"stages": [1]}, {"stages": []}],
        },
        {
            "type": "iteration",
            "i": 2,
            "draft_ms": 300.0,
            "remaining_after": 0,
            "candidates": [{"stages": [1]}, {"stages": [1]}],
        },
        {
            "type": "iteration",
            "i": 3,
            "draft_ms": 900.0,
            "remaining_before": 0,
            "remaining_after": 0,
            "candidates": [{"stages": [1]}],
        },
    ]
    # 0.4 s of drafting, three candidates that reached verification (a parse failure needs no run).
    assert naive_time_to_green(parse_run(records), naive_run_s=2.0) == 0.4 + 3 * 2.0
    assert naive_time_to_green(parse_run(records[:2]), naive_run_s=2.0) is None
    # Gated beside the loop: the goal is the accept whose gate passed, whatever ran meanwhile.
    records[2] = {**records[2], "state": 1}
    gate = {"type": "gate", "iteration": 2, "verdict": "passed", "remaining": 0, "duration_ms": 500.0}
    assert naive_time_to_green(parse_run([*records, gate]), naive_run_s=2.0) == 0.4 + 3 * 2.0
    assert naive_time_to_green(parse_run(records), naive_run_s=2.0) is None  # never gated: never green
    assert verification_per_candidate_s(parse_run([*records, gate])) == 0.5 / 4


def test_a_directory_of_projects_is_a_task_suite(tmp_path):
    write_files(tmp_path / "suite" / "one", {"test_a.py": "def test_a():\n    assert True\n"})
    write_files(tmp_path / "suite" / "two", {"test_b.py": "def test_b():\n    assert True\n"})
    assert [t.name for t in load_tasks(tmp_path / "suite")] == ["one", "two"]
    assert [t.name for t in load_tasks(tmp_path / "suite", limit=1)] == ["one"]


def test_the_templates_are_counted_from_the_traces():
    from ralph.bench.fix import template_stats

    def candidate(operator: str, verdict: str, stage: str | None = None, fingerprint: str = "") -> dict:
        meta = {"operator": operator}
        return {"meta": meta, "verdict": verdict, "failed_stage": stage, "fingerprint": fingerprint}

    traces = [
        [
            {"type": "run_start"},
            {
                "type": "iteration",
                "candidates": [candidate("compare_flip", "rejected"), candidate("add_return", "accepted")],
            },
        ],
        [
            {
                "type": "iteration",
                "candidates": [candidate("compare_flip", "accepted"), {"verdict": "rejected"}],
            }
        ],
        [{"type": "iteration", "candidates": [candidate("compare_flip", "rejected", "policy")]}],
        [  # accepted on its targeted stages, undone by its background gate (with what was built on
            # it): not accepts
            {
                "type": "iteration",
                "state": 1,
                "candidates": [candidate("drop_arg", "accepted", fingerprint="f1")],
            },
            {
                "type": "iteration",
                "state": 2,
                "candidates": [candidate("wrap_abs", "accepted", fingerprint="f2")],
            },
            {"type": "gate", "verdict": "rejected", "fingerprint": "f1", "discarded": [2]},
        ],
    ]
    assert template_stats([parse_run(t) for t in traces]) == {
        "add_return": {"verified": 1, "accepted": 1, "r": 1.0},
        "compare_flip": {"verified": 2, "accepted": 1, "r": 0.5},
        "drop_arg": {"verified": 1, "accepted": 0, "r": 0.0},
        "wrap_abs": {"verified": 1, "accepted": 0, "r": 0.0},
    }


def test_an_edit_accepted_again_after_its_state_was_discarded_counts_as_an_accept():
    """Undone is a property of a state, not of an edit: state 3 (built on 2, whose gate failed) is
    discarded, then the loop, back on state 1, accepts the same edit as 4 and its gate passes. That
    accept counts; one whose gate never reported (the run was killed) does not."""
    from ralph.bench.fix import template_stats

    def accepted(i: int, operator: str, fingerprint: str) -> dict:
        candidate = {"meta": {"operator": operator}, "verdict": "accepted", "fingerprint": fingerprint}
        return {"type": "iteration", "i": i, "state": i, "remaining_before": 2, "remaining_after": 1,
                "candidates": [candidate]}  # fmt: skip

    def gate(state: int, verdict: str, discarded: list[int]) -> dict:
        return {"type": "gate", "state": state, "iteration": state, "verdict": verdict,
                "fingerprint": f"f{state}", "remaining": 1, "discarded": discarded}  # fmt: skip

    trace = [
        accepted(2, "drop_arg", "f2"),
        accepted(3, "wrap_abs", "f3"),
        gate(2, "rejected", [3]),
        accepted(4, "wrap_abs", "f3"),
        gate(4, "passed", []),
        accepted(5, "add_return", "f5"),  # killed before its gate reported
    ]
    assert template_stats([parse_run(trace)]) == {
        "wrap_abs": {"verified": 2, "accepted": 1, "r": 0.5},  # was 0 accepted: undone by fingerprint
        "add_return": {"verified": 1, "accepted": 0, "r": 0.0},  # was 1: never gated, never on the branch
        "drop_arg": {"verified": 1, "accepted": 0, "r": 0.0},
    }


def test_every_state_a_background_gate_rejected_is_reported_as_caught(tmp_path):
    from ralph.bench.fix import gate_catches, gate_verdicts, task_runs

    records = [
        {"type": "gate", "state": 1, "verdict": "passed", "reason": "gate passed"},
        {
            "type": "gate",
            "state": 2,
            "verdict": "rejected",
            "reason": "background gate: breaks tests/t.py::a",
        },
        {"type": "gate", "state": 3, "verdict": "discarded", "reason": "discarded"},
        {"type": "gate", "state": 4, "verdict": "rejected", "reason": "breaks tests/t.py::b", "kept": "todo"},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    results = [{"task": "t", "trace": str(trace)}, {"task": "gone", "trace": str(tmp_path / "none.jsonl")}]
    read = task_runs(results)
    assert gate_catches(read) == [
        {"task": "t", "state": 2, "reason": "background gate: breaks tests/t.py::a", "kept": False},
        {"task": "t", "state": 4, "reason": "breaks tests/t.py::b", "kept": True},  # (--on-gate-failure todo)
    ]
    assert gate_verdicts([run for _, run in read]) == {"passed": 1, "undone": 1, "kept": 1, "not_judged": 1}
