"""The rival-fixes study (tests/study_rival_fixes.py): each plausible mutant judged in the sandbox,
and the policies counted from the judged mutants."""

from __future__ import annotations

import sys

import pytest

from tests.study_rival_fixes import NEIGHBOURHOODS, Lost, outcome, study_task, table, wide_steps
from tests.test_judge import ROW as JUDGED

ROW = {  # test_judge's add_one, with a full test of three calls and an example of one
    **JUDGED,
    "test": "\n\ndef check(c):\n    assert c(1) == 2\n    assert c(-1) == 0\n    assert c(5) == 6\n\ncheck(add_one)\n",
    "example_test": "def check(add_one):\n    assert add_one(0) == 1\ncheck(add_one)\n",
}


def test_each_plausible_mutant_is_judged_and_answers_on_the_neighbours():
    judged = {m["edit"]: m for m in study_task(ROW, sys.executable, "bwrap") or []}
    right, overfit = judged["line 3: `-` -> `+`"], judged["line 3: keep only `1`"]
    assert right["example"] and right["full"] and right["correct"]
    assert overfit["example"] and not overfit["full"] and not overfit["correct"]
    assert right["answers"]["example_near"] == ["1", "0", "2"]  # add_one(0), then -1 and 1
    assert overfit["answers"]["example_near"] == ["1", "1", "1"]
    assert right["calls"] == {"example": 1, "full": 3}
    assert "line 3: `1` -> `0`" not in judged  # add_one(0) == 0: not plausible, not kept
    assert study_task({**ROW, "example_test": ""}, sys.executable, "bwrap") is None
    with pytest.raises(Lost, match="Demo/0"):  # no verdict came back: lost, not "no plausible fix"
        study_task(ROW, "/nonexistent/python", "bwrap")


def test_a_fix_with_a_rival_that_answers_otherwise_is_refused_and_the_oracle_is_the_floor():
    def fix(cost, correct, answers):
        near, calls = dict.fromkeys(NEIGHBOURHOODS, answers), {"example": 1, "full": 6}
        return {
            "example": True,
            "full": correct,
            "correct": correct,
            "cost": cost,
            "answers": near,
            "calls": calls,
        }

    split = [fix(1, False, ["1", "1"]), fix(2, True, ["1", "2"])]  # the cheapest is overfit
    agreed = [fix(1, True, ["3"]), fix(5, True, ["3"])]
    assert outcome([split, agreed], "example", None) == {
        "plausible": 2, "accepted": 2, "overfit": 1, "refused": 0, "refused_correct": 0,
    }  # fmt: skip
    assert outcome([split, agreed], "example", "example_near")["refused"] == 1
    assert outcome([split, agreed], "example", "oracle")["overfit"] == 0
    assert outcome([split, agreed], "full", None)["plausible"] == 2  # a correct one passes the full test
    refused_right = [fix(1, True, ["1"]), fix(2, False, ["2"])]
    assert outcome([refused_right], "example", "example_near")["refused_correct"] == 1
    slow = [fix(1, True, ["timeout:None", "2"]), fix(2, True, ["5", "2"])]  # a late answer is no answer
    assert outcome([slow], "example", "example_near")["refused"] == 0
    assert outcome([split], "example", "example_wide", weak_below=5)["refused"] == 1  # one call: weak
    both = [fix(1, True, ["1"]), fix(2, True, ["2"])]  # both pass the full test, which calls 6 times
    assert outcome([both], "full", "full_wide")["refused"] == 1
    assert outcome([both], "full", "full_wide", weak_below=5)["refused"] == 0
    rows = table([split, agreed]).splitlines()
    assert rows[2] == "| the cheapest plausible mutant | 2 of 2 | 1 (50.0%) | 0 | 2 of 2 | 0 |"
    assert len(rows) == 2 + 5 and rows[-1].startswith("| an oracle")
    assert rows[3].startswith(
        "| refused where a rival differs on the judge's neighbours | 1 of 2 | 0 (0.0%) |"
    )


def test_wider_neighbours_move_strings_and_lists_of_numbers_too():
    assert "" in wide_steps("ab") and "ba" in wide_steps("ab") and "AB" in wide_steps("ab")
    assert [2, 3] in wide_steps([1, 2]) and [] in wide_steps([1, 2])
    assert wide_steps(True) == [False] and wide_steps(None) == []
