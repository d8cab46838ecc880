"""The gate off the critical path: a candidate accepted on its targeted stages is the loop's next state
at once, its whole-suite gate runs beside the loop, and only a state whose gate passed reaches the
branch or counts as the goal. Real git repositories, real pytest, hostile candidates by replay."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.domain.results import CheckResult, StageResult, TestResult
from ralph.domain.score import Observation, score
from ralph.domain.verdict import VerifyReport
from ralph.report import run_stats
from ralph.session import fix
from ralph.trace import read_trace
from ralph.trace_reader import read_run
from ralph.validators.background import BackgroundGate, gate_verdict
from ralph.view import QuietView
from tests.conftest import BUGGY_WINDOWS, git, run_ralph

FIXED = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)")
# Fixes the failing test and breaks a passing one the targeted stage does not run, through lines no
# test ran at the baseline (a decorator added at module level): the probe cannot see it, the gate does.
FIXED_AND_BROKEN = FIXED.replace(
    "def double(x):", "def _tripled(f):\n    return lambda x: f(x) * 3 // 2\n\n\n@_tripled\ndef double(x):"
)
BREAK_THEN_FIX = (
    {"description": "fix and break", "files": {"windows.py": FIXED_AND_BROKEN}},
    {"description": "fix", "files": {"windows.py": FIXED}},
)


def _replay(tmp_path: Path, *records: dict) -> str:
    file = tmp_path / "edits.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    return f"replay:{file}"


def _run(repo: Path, tmp_path: Path, *records: dict, **config: object):
    settings = {"candidates": 1, "background_gate": True, **config}
    return fix(
        repo, RunConfig(drafter=_replay(tmp_path, *records), **settings), view=QuietView(notices=False)
    )


def _records(outcome, type_: str) -> list[dict]:
    return [r for r in read_trace(outcome.trace) if r["type"] == type_]


def _branch_files(repo: Path, branch: str, path: str) -> str:
    return git(repo, "show", f"{branch}:{path}")


@pytest.mark.slow
def test_what_the_gate_rejects_is_undone_and_never_reaches_the_branch(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    outcome = _run(
        repo,
        tmp_path,
        *BREAK_THEN_FIX,
    )
    assert outcome.result.outcome == "goal"
    first, second = _records(outcome, "iteration")[:2]
    # Accepted on its targeted stages (the failing test passes), gated beside the loop...
    assert first["candidates"][0]["verdict"] == "accepted"
    assert first["candidates"][0]["gate"] == "background"
    assert first["state"] == 1 and first["commit"] is None
    gates = _records(outcome, "gate")
    assert [g["verdict"] for g in gates] == ["rejected", "passed"]
    # ... where the whole suite shows the regression, and the loop goes on from the start.
    assert "test_double" in gates[0]["reason"] and gates[0]["commit"] is None
    assert second["remaining_before"] == 1
    assert gates[1]["state"] == second["state"] and gates[1]["remaining"] == 0
    assert _branch_files(repo, outcome.branch, "windows.py") == FIXED
    assert git(repo, "rev-list", "--count", f"main..{outcome.branch}").strip() == "1"
    assert gates[1]["commit"] == outcome.final_commit
    stats = run_stats(read_run(outcome.trace))
    assert stats.accepted == 1 and stats.gate_s > 0
    assert stats.time_to_green_s == gates[1]["elapsed_s"]


@pytest.mark.slow
def test_the_same_candidates_gated_in_line_give_the_same_branch(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    outcome = _run(
        repo,
        tmp_path,
        *BREAK_THEN_FIX,
        background_gate=False,
    )
    assert outcome.result.outcome == "goal"
    first = _records(outcome, "iteration")[0]
    assert first["candidates"][0]["verdict"] == "rejected"
    assert first["candidates"][0]["failed_stage"] == "gate"
    assert not _records(outcome, "gate")
    assert _branch_files(repo, outcome.branch, "windows.py") == FIXED


TWO_BUGS = {
    "f.py": "def f(x):\n    return x + 2\n\n\ndef h(x):\n    return x * 10\n",
    "g.py": "def g(x):\n    return x - 2\n",
    "tests/test_f.py": "from f import f\n\n\ndef test_f():\n    assert f(1) == 2\n",
    "tests/test_g.py": "from g import g\n\n\ndef test_g():\n    assert g(3) == 2\n",
    # Slow enough that the loop accepts the next state before this state's gate has finished.
    "tests/test_h.py": "import time\n\nfrom f import h\n\n\ndef test_h():\n    time.sleep(2)\n    assert h(1) == 10\n",
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
}
F_FIXED = TWO_BUGS["f.py"].replace("x + 2", "x + 1")
F_FIXED_H_BROKEN = F_FIXED.replace(
    "def h(x):", "def _more(f):\n    return lambda x: f(x) + 1\n\n\n@_more\ndef h(x):"
)
G_FIXED = TWO_BUGS["g.py"].replace("x - 2", "x - 1")


@pytest.mark.slow
def test_states_built_on_one_whose_gate_fails_are_discarded_with_it(make_repo, tmp_path):
    repo = make_repo(TWO_BUGS)
    fix_g = {"description": "fix g", "files": {"g.py": G_FIXED}}
    outcome = _run(
        repo,
        tmp_path,
        {"description": "fix f, break h", "files": {"f.py": F_FIXED_H_BROKEN}},
        fix_g,
        {"description": "fix f", "files": {"f.py": F_FIXED}},
        fix_g,  # discarded, not rejected: it may come again
    )
    assert outcome.result.outcome == "goal", outcome.result
    iterations = _records(outcome, "iteration")
    assert [r["remaining_before"] for r in iterations] == [2, 1, 2, 1]
    gates = _records(outcome, "gate")
    assert gates[0]["verdict"] == "rejected" and gates[0]["discarded"] == [iterations[1]["state"]]
    assert "test_h" in gates[0]["reason"]
    assert [g["verdict"] for g in gates[1:]] == ["passed", "passed"]
    assert _branch_files(repo, outcome.branch, "f.py") == F_FIXED
    assert _branch_files(repo, outcome.branch, "g.py") == G_FIXED
    # Committed, one by one as their gates passed: only those two states (the run's branch then holds
    # them as one commit, naming both steps).
    first, second = gates[1]["commit"], gates[2]["commit"]
    assert git(repo, "rev-parse", f"{first}^").strip() == git(repo, "rev-parse", "main").strip()
    assert git(repo, "rev-parse", f"{second}^").strip() == first
    assert git(repo, "rev-list", "--count", f"main..{outcome.branch}").strip() == "1"
    message = git(repo, "log", "-1", "--format=%B", outcome.branch)
    assert message.split("Steps:\n", 1)[1].split("\n\n")[0].splitlines() == ["- fix f", "- fix g"]
    stats = run_stats(read_run(outcome.trace))
    assert stats.accepted == 2  # the undone accepts removed nothing


@pytest.mark.slow
def test_a_gate_that_crashes_fails_its_state_with_the_reason_and_the_loop_goes_on(
    make_repo, tmp_path, monkeypatch
):
    repo = make_repo(BUGGY_WINDOWS)
    judge = BackgroundGate._judge
    calls = []

    def crash_once(self, job):
        calls.append(job.state)
        if len(calls) == 1:
            raise RuntimeError("the gate's disk vanished")
        return judge(self, job)

    monkeypatch.setattr(BackgroundGate, "_judge", crash_once)
    other_fix = FIXED.replace("for i in range", "for i in  range")
    outcome = _run(
        repo,
        tmp_path,
        {"description": "fix", "files": {"windows.py": FIXED}},
        {"description": "fix, spelled another way", "files": {"windows.py": other_fix}},
    )
    gates = _records(outcome, "gate")
    assert gates[0]["verdict"] == "rejected"
    assert "no verdict" in gates[0]["reason"] and "disk vanished" in gates[0]["reason"]
    assert gates[1]["verdict"] == "passed"
    assert outcome.result.outcome == "goal"


@pytest.mark.slow
def test_a_gate_that_hangs_is_a_failed_gate_for_its_state(make_repo, tmp_path, monkeypatch):
    from ralph.validators.facts import Budgets

    monkeypatch.setattr(Budgets, "gate_timeout_s", property(lambda self: 4.0))
    repo = make_repo(BUGGY_WINDOWS)
    # Hangs only where the gate runs it (at the user's repository path): the targeted stages pass.
    hangs_in_the_gate = (
        f"import os\nimport time\n\nif os.getcwd() == {str(repo)!r}:\n    time.sleep(600)\n\n\n" + FIXED
    )
    began = time.monotonic()
    outcome = _run(
        repo,
        tmp_path,
        {"description": "fix that hangs in the gate", "files": {"windows.py": hangs_in_the_gate}},
        {"description": "fix", "files": {"windows.py": FIXED}},
    )
    assert time.monotonic() - began < 60
    gates = _records(outcome, "gate")
    assert gates[0]["verdict"] == "rejected" and "no verdict" in gates[0]["reason"]
    assert outcome.result.outcome == "goal"
    assert _branch_files(repo, outcome.branch, "windows.py") == FIXED


SLOW_GATE = {
    **BUGGY_WINDOWS,
    "tests/test_slow.py": "import time\n\n\ndef test_slow():\n    time.sleep(6)\n",
}


@pytest.mark.slow
def test_max_seconds_cancels_the_gate_and_the_branch_holds_gated_states_only(make_repo, tmp_path):
    repo = make_repo(SLOW_GATE)
    began = time.monotonic()
    outcome = _run(repo, tmp_path, {"description": "fix", "files": {"windows.py": FIXED}}, max_seconds=2.0)
    loop_s = time.monotonic() - began - outcome.baseline_s
    assert outcome.result.outcome == "max_seconds"
    assert loop_s < 5, "the gate was waited for, not cancelled"
    assert outcome.branch is None and outcome.final_commit is None
    gates = _records(outcome, "gate")
    assert [g["verdict"] for g in gates] == ["cancelled"]
    end = _records(outcome, "run_end")[-1]
    assert end["accepted"] == 0 and end["final_commit"] is None


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="signals to a child process group")
def test_ctrl_c_stops_the_gate_at_once_and_resume_redoes_the_ungated_state(make_repo, tmp_path):
    repo = make_repo(SLOW_GATE)
    drafter = _replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    argv = ["fix", str(repo), "--drafter", drafter, "--candidates", "1", "--background-gate", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ralph", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = repo / ".ralph" / "runs"
    deadline = time.monotonic() + 60
    trace = None
    while time.monotonic() < deadline:  # until the fix is accepted and its gate is running
        traces = list(runs.glob("*/trace.jsonl")) if runs.is_dir() else []
        if traces and any('"state": 1' in line for line in traces[0].read_text().splitlines()):
            trace = traces[0]
            break
        time.sleep(0.1)
    assert trace is not None, "the fix was never accepted"
    stopped = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - stopped < 4, "the gate was waited for, not stopped"
    assert proc.returncode == 130, err
    records = read_trace(trace)
    assert [r["verdict"] for r in records if r["type"] == "gate"] == ["cancelled"]
    assert records[-1]["type"] == "run_end" and records[-1]["final_commit"] is None
    run_id = trace.parent.name
    assert not git(repo, "branch", "--list", f"ralph/{run_id}").strip()
    # The run knows the state was never gated: the resumed run verifies the fix again and gates it.
    resumed = run_ralph("fix", str(repo), "--resume", run_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert _branch_files(repo, f"ralph/{run_id}", "windows.py") == FIXED
    assert os.path.exists(trace)


def _slow_h(seconds: int) -> dict[str, str]:
    sleeps = f"import time\n\nfrom f import h\n\n\ndef test_h():\n    time.sleep({seconds})\n    assert h(1) == 10\n"
    return {**TWO_BUGS, "tests/test_h.py": sleeps}


@pytest.mark.slow
def test_a_run_whose_later_state_fails_its_gate_is_never_reported_green(make_repo, tmp_path):
    repo = make_repo(_slow_h(3))
    outcome = _run(
        repo,
        tmp_path,
        {"description": "fix f", "files": {"f.py": F_FIXED}},
        {"description": "fix g, break h", "files": {"f.py": F_FIXED_H_BROKEN, "g.py": G_FIXED}},
    )
    assert outcome.result.remaining > 0
    gates = _records(outcome, "gate")
    # The first gate passed while the loop stood on the second state (no error left): its record
    # says what the gated state has left, not what the ungated one claimed.
    assert gates[0]["verdict"] == "passed" and gates[0]["remaining"] == 1
    assert run_stats(read_run(outcome.trace)).time_to_green_s is None


@pytest.mark.slow
def test_what_was_rejected_against_an_undone_state_may_be_verified_again(make_repo, tmp_path):
    repo = make_repo(_slow_h(5))
    outcome = _run(
        repo,
        tmp_path,
        {"description": "fix f, break h", "files": {"f.py": F_FIXED_H_BROKEN}},
        {"description": "fix f", "files": {"f.py": F_FIXED}},  # no improvement on that state
        {"description": "fix g", "files": {"g.py": G_FIXED}},
        {"description": "fix f again", "files": {"f.py": F_FIXED}},
        {"description": "fix g again", "files": {"g.py": G_FIXED}},
    )
    assert outcome.result.outcome == "goal"
    assert _branch_files(repo, outcome.branch, "f.py") == F_FIXED


@pytest.mark.slow
def test_a_cancelled_gate_starts_nothing_more(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    began = time.monotonic()
    outcome = _run(
        repo,
        tmp_path,
        {"description": "fix", "files": {"windows.py": FIXED}},
        max_seconds=1.5,
        checks=["sleep 3", "sleep 3"],
    )
    assert time.monotonic() - began - outcome.baseline_s < 3.5, "the second check ran after the cancel"
    assert outcome.result.outcome == "max_seconds"


@pytest.mark.slow
def test_the_time_budget_bounds_the_wait_for_the_last_gate_whatever_stopped_the_loop(make_repo, tmp_path):
    repo = make_repo(
        {**BUGGY_WINDOWS, "tests/test_slow.py": "import time\n\n\ndef test_slow():\n    time.sleep(8)\n"}
    )
    began = time.monotonic()
    outcome = _run(
        repo,
        tmp_path,
        {"description": "fix", "files": {"windows.py": FIXED}},
        max_seconds=2.0,
        max_iterations=1,
    )
    assert time.monotonic() - began - outcome.baseline_s < 5
    assert outcome.final_commit is None and outcome.result.exit_code == 1


# --on-gate-failure todo: the gate's findings as a todo list, through the real command line.


def _fix_cli(repo: Path, tmp_path: Path, *records: dict, mode: str, json_out: bool = True):
    drafter = _replay(tmp_path, *records)
    args = ["fix", str(repo), "--drafter", drafter, "--candidates", "1", "--background-gate"]
    return run_ralph(*args, "--on-gate-failure", mode, *(["--json"] if json_out else []), timeout=240)


@pytest.mark.slow
def test_in_todo_mode_the_regression_the_gate_found_is_fixed_next_and_committed_with_its_state(
    make_repo, tmp_path
):
    repo = make_repo(_slow_h(0))
    proc = _fix_cli(
        repo,
        tmp_path,
        {"description": "fix f, break h", "files": {"f.py": F_FIXED_H_BROKEN}},
        {"description": "fix g", "files": {"g.py": G_FIXED}},  # on it: h still broken
        {"description": "unbreak h", "files": {"f.py": F_FIXED}},
        mode="todo",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    records = read_trace(Path(summary["trace"]))
    gates = [r for r in records if r["type"] == "gate"]
    assert [(g["verdict"], g.get("kept")) for g in gates] == [
        ("rejected", "todo"),
        ("rejected", "todo"),
        ("passed", None),
    ]
    assert "test_h" in gates[0]["reason"] and "still breaks" in gates[1]["reason"]
    assert all(g["commit"] is None for g in gates[:2]) and gates[2]["commit"] == summary["final_commit"]
    assert gates[2]["kept_states"] == [1, 2]
    # The loop went on from each kept state, not the start (whether "fix g" was drafted before or
    # after the first gate's verdict): test_h, which the gate saw fail, was what was left to fix.
    iterations = [r for r in records if r["type"] == "iteration"]
    assert [r["on_state"] for r in iterations] == [0, 1, 2] and iterations[2]["remaining_before"] == 1
    # One commit holds the three states' edits; no state whose gate failed is on the branch alone.
    branch = summary["branch"]
    assert git(repo, "rev-list", "--count", f"main..{branch}").strip() == "1"
    assert _branch_files(repo, branch, "f.py") == F_FIXED
    assert _branch_files(repo, branch, "g.py") == G_FIXED
    assert "iterations 1, 2 (kept" in git(repo, "log", "-1", "--format=%B", branch)
    run = read_run(Path(summary["trace"]))
    assert run.undone == frozenset() and run.green_s == gates[2]["elapsed_s"]


@pytest.mark.slow
def test_in_todo_mode_a_regression_never_fixed_never_reaches_the_branch(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    proc = _fix_cli(repo, tmp_path, BREAK_THEN_FIX[0], mode="todo", json_out=False)
    assert proc.returncode == 1, proc.stderr
    assert "not committed: the edits of iterations 1, kept though" in proc.stdout
    assert "still failing: tests/test_windows.py::test_double" in proc.stdout
    assert not git(repo, "branch", "--list", "ralph/*").strip()
    [trace] = (repo / ".ralph" / "runs").glob("*/trace.jsonl")
    end = read_trace(trace)[-1]
    assert end["outcome"] == "stalled" and end["final_commit"] is None and end["uncommitted_states"] == [1]


def test_a_bad_on_gate_failure_is_one_line_and_exit_2(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    proc = run_ralph("fix", str(repo), "--on-gate-failure", "later")
    assert proc.returncode == 2 and "on_gate_failure" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# What a gate's report makes of its state (pure).

START = Observation(
    {t: TestResult(t, o) for t, o in {"fix": "failed", "old": "passed", "flaky": "failed"}.items()}
)


def _state(fix: str, old: str, flaky: str, **checks: bool) -> Observation:
    tests = {"fix": fix, "old": old, "flaky": flaky}
    return Observation(
        {t: TestResult(t, o) for t, o in tests.items()},
        checks={c: CheckResult(c, passed=p) for c, p in checks.items()},
    )


def _verdict(seen, base, passed=None, *, accepted=False, targets=None, keep=True, stages=()):
    report = VerifyReport(accepted, "gate", list(stages), observation=seen)
    judge = lambda obs: score(START, obs, targets)  # noqa: E731
    return gate_verdict(report, base, passed, judge, keep_regressions=keep)[0]


def test_only_a_regressed_test_counted_in_the_error_is_kept_and_only_in_todo_mode():
    base, regressed = _state("passed", "passed", "passed"), _state("passed", "failed", "passed")
    assert _verdict(regressed, base) == "kept"
    assert _verdict(regressed, base, keep=False) == "rejected"
    # A test failing at the start that is no target is not counted: the run could end on it as the goal.
    flaky = _state("passed", "passed", "failed")
    assert _verdict(flaky, base) == "kept"
    assert _verdict(flaky, base, targets=frozenset({"fix"})) == "rejected"
    # Anything else broken too, or no verdict at all: undone.
    lint_broken = _state("passed", "failed", "passed", lint=False)
    assert _verdict(lint_broken, _state("passed", "passed", "passed", lint=True)) == "rejected"
    hung = StageResult("gate", ok=False, duration_ms=1.0, error="timed out")
    assert _verdict(regressed, base, stages=[hung]) == "rejected"
    assert _verdict(None, base) == "rejected"


def test_a_state_on_a_kept_one_passes_only_when_it_breaks_nothing_the_last_passed_state_passed():
    passed, kept = START, _state("passed", "failed", "failed")
    still = _state("passed", "failed", "passed")  # better than the kept state, yet "old" still fails
    assert _verdict(still, kept, passed, accepted=True) == "kept"
    assert _verdict(_state("passed", "passed", "failed"), kept, passed, accepted=True) == "passed"
    assert _verdict(still, kept, None, accepted=True) == "passed"  # (on a passed state: as before)
    # No error the score counts left, and a test broken that it does not count: never kept (the run
    # would end on it as the goal), never passed.
    flaky_broken = _state("passed", "passed", "failed")
    fine = _state("failed", "passed", "passed")
    assert _verdict(flaky_broken, kept, fine, accepted=True, targets=frozenset({"fix"})) == "rejected"


@pytest.mark.slow
def test_in_todo_mode_an_edit_undone_by_a_later_state_is_checked_as_undone(make_repo, tmp_path):
    """A kept state's edit of a file only a check reads, put back as it was by the state built on it:
    that state's gate checks the file as it now is (the check fails again), not as the kept state left
    it, and the run is not green while the check fails."""
    repo = make_repo(
        {
            **_slow_h(0),
            "notes.py": "STATUS = 'todo'\n",
            "check.py": "import sys\n\nsys.exit(0 if 'done' in open('notes.py').read() else 1)\n",
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
            '[tool.ralph]\nchecks = ["python3 check.py"]\n',
        }
    )
    proc = _fix_cli(
        repo,
        tmp_path,
        # fixes f and the check's file, breaks h (seen by the gate alone): kept
        {
            "description": "fix f, notes done, break h",
            "files": {"f.py": F_FIXED_H_BROKEN, "notes.py": "STATUS = 'done'\n"},
        },
        # unbreaks h, fixes g, and puts notes.py back as it was at the start: the check fails again
        {
            "description": "fix g, unbreak h, notes back",
            "files": {"f.py": F_FIXED, "g.py": G_FIXED, "notes.py": "STATUS = 'todo'\n"},
        },
        mode="todo",
    )
    summary = json.loads(proc.stdout)
    records = read_trace(Path(summary["trace"]))
    assert records[-1]["outcome"] != "goal", "green while the check fails"
    branch = summary.get("branch")
    if branch:
        assert "done" not in _branch_files(repo, branch, "notes.py")
