"""The offline drafter's order: line score x template prior, the priors learned from traces and
shipped as data."""

from __future__ import annotations

import json

from ralph.domain.protocols import DraftContext
from ralph.domain.results import TestResult
from ralph.drafters.mutation import MutationDrafter, value_hints
from ralph.drafters.mutation_ops import COSTS
from ralph.drafters.priors import priors, shipped
from tests.conftest import run_ralph

SOURCE = "def pick(xs, n):\n    first = xs[0]\n    if n > 3:\n        return first\n    return n\n"


def _context(tmp_path, suspicious, suspicion) -> DraftContext:
    (tmp_path / "pick.py").write_text(SOURCE)
    return DraftContext(
        task="",
        project=tmp_path,
        state_id=0,
        failing_tests=(TestResult("tests/test_pick.py::test_pick", "failed", message="assert 1 == 2"),),
        diagnostics=(),
        failing_checks=(),
        suspicious=suspicious,
        suspicion=suspicion,
    )


def _operators(drafter: MutationDrafter, context: DraftContext, n: int = 400) -> list[str]:
    return [str(c.meta["operator"]) for c in drafter.draft(context, n)]


def test_a_template_that_fixes_more_is_tried_first_on_lines_as_suspicious():
    counts = {"compare_flip": {"verified": 100, "accepted": 30}, "index_off_by_one": {"verified": 100}}
    learned = priors(counts, COSTS)
    assert learned["compare_flip"] > learned["index_off_by_one"]
    # A template with no record gets the default its cost gives: cheaper ones above dearer ones.
    assert learned["binop_swap"] > learned["delete_statement"]


def test_line_score_times_prior_orders_mutants_across_lines(tmp_path):
    lines = (("pick.py", 2), ("pick.py", 3))
    favour = {op: 0.01 for op in COSTS} | {"compare_flip": 0.5}
    equal = _operators(MutationDrafter(favour), _context(tmp_path, lines, (1.0, 1.0)))
    assert equal[0] == "compare_flip"  # on the second line, first: as suspicious, likelier to fix
    # The first line ten times as suspicious: its templates come before the second line's.
    far = MutationDrafter(favour).draft(_context(tmp_path, lines, (1.0, 0.01)), 400)
    first_flip = next(i for i, c in enumerate(far) if c.meta["operator"] == "compare_flip")
    assert first_flip > 0 and all(":line 2:" in c.description for c in far[:first_flip])


def test_without_scores_the_lines_keep_their_rank(tmp_path):
    lines = (("pick.py", 2), ("pick.py", 3))
    found = MutationDrafter({op: 0.1 for op in COSTS}).draft(_context(tmp_path, lines, ()), 400)
    singles = [c for c in found if c.meta["operator"] != "pair"]
    ranks = [1 if ":line 2:" in c.description else 2 for c in singles if "line 1:" not in c.description]
    assert ranks == sorted(ranks)


def test_the_shipped_priors_name_only_templates_that_exist():
    data = shipped()
    assert data, "ralph/drafters/template_priors.json is missing or empty"
    assert set(data) <= set(COSTS) | {"ruff_--fix", "ruff_format", "pair"}
    assert all(c["accepted"] <= c["verified"] for c in data.values())


def test_bench_priors_learns_the_counts_from_traces(tmp_path):
    def iteration(*candidates: tuple[str, str]) -> dict[str, object]:
        return {
            "type": "iteration",
            "state": 0,
            "candidates": [
                {"verdict": v, "fingerprint": f"{op}{i}", "meta": {"operator": op}}
                for i, (op, v) in enumerate(candidates)
            ],
        }

    trace = tmp_path / "traces" / "t.jsonl"
    trace.parent.mkdir()
    records = [
        iteration(("compare_flip", "rejected"), ("compare_flip", "accepted"), ("drop_arg", "rejected"))
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "priors.json"
    proc = run_ralph("bench", "priors", str(trace.parent), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["traces"] == 1
    assert data["templates"] == {
        "compare_flip": {"verified": 2, "accepted": 1},
        "drop_arg": {"verified": 1, "accepted": 0},
    }
    missing = run_ralph("bench", "priors", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def _failing(message: str, tmp_path) -> DraftContext:
    context = _context(tmp_path, (("pick.py", 3),), (1.0,))
    test = TestResult("tests/test_pick.py::test_pick", "failed", message=message)
    return DraftContext(**{**vars(context), "failing_tests": (test,)})


def test_an_answer_one_off_puts_the_off_by_one_templates_first(tmp_path):
    favour = {op: 0.1 for op in COSTS} | {"var_substitute": 0.2}
    plain = _operators(MutationDrafter(favour), _failing("E   assert 'a' == 'b'", tmp_path))
    assert plain[0] == "var_substitute"
    one_off = _operators(MutationDrafter(favour), _failing("E   assert 4 == 5", tmp_path))
    assert one_off[0] in ("compare_flip", "const_off_by_one")  # `n > 3` -> `n >= 3`, `n > 4`
    assert value_hints(_failing("E   assert True == False", tmp_path)).get("negate_condition", 1) > 1
    assert value_hints(_failing("E   assert -2 == 2", tmp_path)).get("unary_remove", 1) > 1
    lists = "E   assert [1, 2] == [1, 2, 3]\n      Right contains one more item: 3"
    assert value_hints(_failing(lists, tmp_path)).get("slice_off_by_one", 1) > 1
    assert not value_hints(_failing("E   assert 4 == 9", tmp_path))


def test_odd_assertion_values_say_nothing_and_raise_nothing(tmp_path):
    huge = "9" * 400
    for message in (
        f"E   assert {huge} == 1.5",
        "E   assert inf == 1",
        "E   assert nan == nan",
        "E   assert (1 == 2",
    ):
        assert not value_hints(_failing(message, tmp_path))


def test_bench_priors_refuses_what_is_not_a_trace_with_one_line(tmp_path):
    garbled = tmp_path / "bad.jsonl"
    garbled.write_text(json.dumps({"type": "iteration", "candidates": [{"meta": {"operator": "x"}}]}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"type": "run_start"}) + "\n")
    good = tmp_path / "good.jsonl"
    good.write_text(
        json.dumps(
            {"type": "iteration", "candidates": [{"verdict": "accepted", "meta": {"operator": "drop_arg"}}]}
        )
        + "\n"
    )
    for args in (
        [str(garbled)],
        [str(empty)],
        [str(good), "--out", str(tmp_path / "no" / "such" / "x.json")],
    ):
        proc = run_ralph("bench", "priors", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
