"""The judge of a plausible fix (`ralph bench fix --visible example`): the full test the loop never
saw, and the outputs against the canonical solution's, run in the sandbox."""

from __future__ import annotations

import json
import sys

import pytest

from ralph.bench.judge import Hidden, inputs, judge, neighbours
from tests.conftest import run_ralph

ROW = {
    "task_id": "Demo/0",
    "entry_point": "add_one",
    "prompt": 'def add_one(x):\n    """x plus one."""\n',
    "canonical_solution": "    return x + 1\n",
    "buggy_solution": "    return x - 1\n",
    "test": "\n\ndef check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n\ncheck(add_one)\n",
    "example_test": "def check(add_one):\n    assert add_one(1) == 2\ncheck(add_one)\n",
}
HIDDEN = Hidden.of(ROW)


def test_the_inputs_are_the_tests_literal_calls_then_their_neighbours():
    test = "def check(f):\n    assert f([1, 2], 'ab') == 3\n    assert f(g(), 'x') == 1\n"
    found = inputs(test, "solve")
    assert found[0] == (([1, 2], "ab"), False)  # f(g(), ...) has an argument that is no literal
    near = [args for args, is_near in found if is_near]
    assert ([1], "ab") in near and ([2, 1], "ab") in near and ([1, 2, 2], "ab") in near
    assert all(args[1] == "ab" for args in near)  # a string is never moved (its grammar would break)
    assert neighbours((3, 0.5, True)) == [
        (2, 0.5, True),
        (4, 0.5, True),
        (3, 0.0, True),
        (3, 1.0, True),
        (3, 0.5, False),
    ]


def test_a_right_fix_is_correct():
    verdict = judge(ROW["prompt"] + "    return 1 + x\n", HIDDEN, sys.executable, "bwrap")
    assert verdict["hidden"] == "pass" and verdict["correct"], verdict
    assert verdict["compared"] == 2 + 3  # the two calls and their neighbours 0, 2 and -2


def test_a_fix_that_learned_the_visible_test_fails_the_full_one():
    overfit = ROW["prompt"] + "    if x == 1:\n        return 2\n    return x - 1\n"
    verdict = judge(overfit, HIDDEN, sys.executable, "bwrap")
    assert verdict["hidden"].startswith("fail") and not verdict["correct"]
    assert verdict["differs"] == ["(-1,)"]


def test_a_fix_that_passes_the_full_test_and_differs_next_to_it_is_not_correct():
    near_miss = ROW["prompt"] + "    return x + 1 if x < 2 else x\n"
    verdict = judge(near_miss, HIDDEN, sys.executable, "bwrap")
    assert verdict["hidden"] == "pass" and not verdict["differs"]
    assert verdict["differs_near"] == ["(2,)"] and not verdict["correct"]


def test_a_fix_that_prints_is_judged_and_a_test_with_no_literal_call_compares_nothing():
    chatty = ROW["prompt"] + "    print('x', end='')\n    return x + 1\n"
    assert judge(chatty, HIDDEN, sys.executable, "bwrap")["correct"]
    computed = Hidden.of({**ROW, "test": "def check(f):\n    n = 1\n    assert f(n) == 2\ncheck(add_one)\n"})
    verdict = judge(ROW["prompt"] + "    return x + 1\n", computed, sys.executable, "bwrap")
    assert verdict["correct"] and verdict["compared"] == 0


@pytest.mark.slow
def test_a_fix_that_catches_everything_forever_is_unfinished_not_correct():
    stubborn = (
        ROW["prompt"]
        + "    while True:\n        try:\n            pass\n        except BaseException:\n            pass\n"
    )
    verdict = judge(stubborn, HIDDEN, sys.executable, "bwrap", limit_s=5)
    assert verdict["unfinished"] == "timed out" and not verdict["correct"]


@pytest.mark.slow
def test_a_fix_that_hangs_or_does_not_import_is_not_correct():
    hangs = ROW["prompt"] + "    while True:\n        pass\n"
    assert judge(hangs, HIDDEN, sys.executable, "bwrap", hidden_s=1.0)["hidden"] == "timeout"
    broken = judge("raise SystemExit(0)\n", HIDDEN, sys.executable, "bwrap")
    assert broken["hidden"].startswith("the fix does not import") and not broken["correct"]


@pytest.mark.slow
def test_bench_fix_with_the_example_visible_judges_each_plausible_fix(tmp_path):
    already = {
        **ROW,
        "task_id": "Demo/1",
        "example_test": "def check(add_one):\n    assert add_one(-5) != 0\n",
    }
    no_example = {**ROW, "task_id": "Demo/2", "example_test": ""}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in (ROW, already, no_example)))
    args = ["bench", "fix", str(tasks), "--out", str(tmp_path / "out"), "--max-iterations", "3"]
    proc = run_ralph(*args, "--visible", "example", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["tasks"] == 2  # a task with no example test has nothing for the loop to see
    assert (summary["plausible"], summary["correct"], summary["overfit"]) == (1, 1, 0)
    assert summary["nothing_to_fix"] == 1  # its visible test passed before any edit...
    assert summary["fixed"] == 1  # ...so it is no fix
    assert summary["judged_by"]["mutation"] == {"plausible": 1, "correct": 1, "overfit": 0}
    bad = run_ralph(*args, "--visible", "hidden")
    assert bad.returncode == 2 and "--visible 'hidden': one of full, example" in bad.stderr
    projects = run_ralph("bench", "fix", str(tmp_path), "--visible", "example")
    assert projects.returncode == 2 and "only for a HumanEvalFix-style JSONL file" in projects.stderr
    tasks.write_text(json.dumps({**ROW, "example_test": 5}) + "\n")
    bad = run_ralph(*args, "--visible", "example")
    assert bad.returncode == 2 and "not a HumanEvalFix-style JSONL file" in bad.stderr, bad.stderr
