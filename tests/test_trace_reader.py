"""A run's trace read back, typed: what a background gate undid, gated progress and time to green,
a run killed mid-write, old traces without the newer fields, and bad input as one line."""

from __future__ import annotations

import json

import pytest

from ralph.domain.errors import RalphError
from ralph.report import run_stats
from ralph.trace_reader import parse_run, read_run
from tests.conftest import run_ralph


def iteration(i, before, after, *, state=None, fingerprint="", elapsed=None, **extra):
    record = {
        "type": "iteration",
        "schema": 1,
        "i": i,
        "drafter": "fast",
        "remaining_before": before,
        "remaining_after": after,
        "accepted": after < before,
        "draft_ms": 10.0,
        "verify_ms": 20.0,
        "overhead_ms": 5.0,
        "elapsed_s": elapsed if elapsed is not None else float(i),
        "cost_usd": 0.0,
        "candidates": [{"verdict": "accepted" if after < before else "rejected", "fingerprint": fingerprint}],
        **extra,
    }
    if state is not None:
        record["state"] = state
    return record


def gate(state, verdict, remaining, *, discarded=(), elapsed=None, **extra):
    return {
        **extra,
        "type": "gate",
        "schema": 1,
        "state": state,
        "iteration": state,
        "fingerprint": f"f{state}",
        "verdict": verdict,
        "reason": verdict,
        "duration_ms": 100.0,
        "remaining": remaining,
        "elapsed_s": elapsed if elapsed is not None else state + 0.5,
        "discarded": list(discarded),
    }


START = {"type": "run_start", "schema": 1, "run_id": "r1", "baseline": {"remaining": 3}}
# 1 is gated in line; 2 and 3 (built on 2) gate in the background; 2's gate fails and discards 3;
# back on state 1, 4 accepts 3's edit again, and its gate passes: the run is green.
UNDONE = [
    START,
    iteration(1, 3, 2, fingerprint="f1"),
    iteration(2, 2, 1, state=2, fingerprint="f2", on_state=1),
    iteration(3, 1, 0, state=3, fingerprint="f3", on_state=2),
    gate(2, "rejected", 2, discarded=[3], elapsed=3.5),
    iteration(4, 2, 1, state=4, fingerprint="f3", on_state=1),
    gate(4, "passed", 1, elapsed=4.5),
    iteration(5, 1, 0, fingerprint="f5"),
    {"type": "run_end", "schema": 1, "outcome": "goal", "wall_s": 6.0, "remaining": 0},
]


def test_a_failed_gate_undoes_its_state_and_every_state_it_discarded():
    run = parse_run(UNDONE)
    assert run.undone == {2, 3}
    assert [it.undone for it in run.iterations] == [False, True, True, False, False]
    assert [it.removed for it in run.iterations] == [1, 0, 0, 1, 1]
    assert [len(it.kept) for it in run.iterations] == [1, 0, 0, 1, 1]  # an undone accept is no accept
    assert run_stats(run).accepted == 3


def test_the_same_edit_accepted_again_after_an_undo_is_an_accept():
    """Undone is a property of a state, not of an edit: 4 re-accepts 3's edit, and it counts."""
    [again] = parse_run(UNDONE).iterations[3].kept
    assert again.fingerprint == "f3"


def test_a_state_whose_gate_never_reported_is_undone():
    """A run killed while a gate ran: its provisional state never reached the branch."""
    run = parse_run(UNDONE[:4])
    assert run.undone == {2, 3} and run.green_s is None


# --on-gate-failure todo: 2's gate finds a regression and keeps it; 3, built on it, still carries it
# and is kept too; 4 fixes it, and its commit holds 2's and 3's edits.
KEPT = [
    START,
    iteration(1, 3, 2, state=1, fingerprint="f1", on_state=0),
    gate(1, "passed", 2),
    iteration(2, 2, 1, state=2, fingerprint="f2", on_state=1),
    gate(2, "rejected", 2, kept="todo"),
    iteration(3, 2, 1, state=3, fingerprint="f3", on_state=2),
    gate(3, "rejected", 2, kept="todo"),
    iteration(4, 1, 0, state=4, fingerprint="f4", on_state=3),
    gate(4, "passed", 0, kept_states=[2, 3]),
    {"type": "run_end", "schema": 1, "outcome": "goal", "wall_s": 6.0, "remaining": 0},
]


def test_a_state_kept_as_a_todo_is_not_undone_once_a_state_built_on_it_passes():
    run = parse_run(KEPT)
    assert run.undone == frozenset()
    assert [g.kept for g in run.gates] == [False, True, True, False] and run.gates[3].kept_states == (2, 3)
    assert run.steps == (3, 2, 2, 2, 0) and run.green_iteration == 4


def test_a_kept_state_no_passed_state_carried_never_reached_the_branch():
    run = parse_run(KEPT[:7])
    assert run.undone == {2, 3} and run.green_s is None


def test_progress_and_time_to_green_count_gated_states_only():
    run = parse_run(UNDONE)
    assert run.steps == (3, 2, 2, 2, 1, 0)  # 2 and 3 never counted; 4 counts once its gate passed
    assert (run.green_s, run.green_iteration) == (5.0, 5)


def test_a_truncated_last_line_is_skipped(tmp_path):
    trace = tmp_path / "trace.jsonl"
    whole = "".join(json.dumps(r) + "\n" for r in UNDONE[:3])
    trace.write_text(whole + json.dumps(UNDONE[3])[:40])  # killed mid-write
    run = read_run(trace)
    assert [it.i for it in run.iterations] == [1, 2] and run.end is None
    assert run_stats(run).outcome == "unfinished"


def test_an_old_trace_without_the_newer_fields_reads_with_defaults():
    old = [
        {"type": "run_start", "schema": 1, "run_id": "old"},
        {"type": "iteration", "i": 1, "drafter": "fast", "remaining_before": 2, "remaining_after": 1},
        {"type": "iteration", "i": 2, "drafter": "fast", "remaining_after": 0, "candidates": [{}]},
        {"type": "run_end", "schema": 1, "outcome": "goal"},
    ]
    run = parse_run(old)
    first, second = run.iterations
    assert (first.elapsed_s, first.overhead_ms, first.state, first.candidates) == (None, 0.0, None, ())
    assert second.remaining_before == 1  # where the iteration before it left the run
    assert (run.green_iteration, run.green_s) == (2, None)  # reached, at a time the trace does not say
    stats = run_stats(run)
    assert (stats.outcome, stats.remaining_at_start, stats.wall_s, stats.gate_wait_s) == ("goal", 2, 0.0, 0.0)


def test_a_record_of_the_wrong_shape_is_one_line_naming_the_trace(tmp_path):
    trace = tmp_path / "runs" / "r1" / "trace.jsonl"
    trace.parent.mkdir(parents=True)
    bad = {**UNDONE[1], "remaining_before": "many"}
    trace.write_text(json.dumps(START) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(RalphError, match="record 2 is not a ralph trace record"):
        read_run(trace)
    proc = run_ralph("report", str(trace))
    assert proc.returncode == 2 and str(trace) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_resumed_run_may_verify_again_what_was_kept_or_judged_on_a_kept_state():
    """The branch holds no kept state that nothing carried: a resumed run starts from the last
    passed one, where neither a kept edit nor what was rejected on it is known to fail."""
    from ralph.session import _rejected_and_tip

    judged_on_kept = iteration(4, 2, 2, fingerprint="f9", on_state=3)
    rejected, _ = _rejected_and_tip([*KEPT[:7], judged_on_kept])
    assert rejected == frozenset()
    rejected, _ = _rejected_and_tip(UNDONE)  # (a state undone by its gate: its edit is rejected)
    assert rejected == {"f2"}
