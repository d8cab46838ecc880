"""What a user sees, through the real `ralph` entry point: endings that say why and what next, the
live line, `ralph clean`, `ralph doctor`, `ralph report --compare/--plot`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ralph.config import RunConfig
from ralph.session import fix
from tests.conftest import BUGGY_WINDOWS, git, run_ralph

MISSING_MODULE = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "import nosuchpkg_for_ralph\n\nfrom calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
}

# A bug the offline drafter's templates cannot fix: the right answer is nowhere near a single token.
UNFIXABLE = {
    "calc.py": "def add(a, b):\n    return 7\n",
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
}


def test_a_missing_module_is_called_an_environment_problem(make_repo):
    repo = make_repo(MISSING_MODULE)
    proc = run_ralph("fix", str(repo), "--max-iterations", "2")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "still failing: tests/test_calc.py" in out
    assert "cannot import nosuchpkg_for_ralph" in out and "--python" in out


@pytest.mark.slow
def test_a_stalled_offline_run_suggests_a_model_and_counts_the_baseline_in_its_time(make_repo):
    repo = make_repo(UNFIXABLE)
    proc = run_ralph("fix", str(repo), "--max-iterations", "30")
    assert proc.returncode == 1, proc.stderr
    assert "still failing: tests/test_calc.py::test_add" in proc.stdout
    assert "--drafter PROVIDER/MODEL" in proc.stdout
    data = json.loads(run_ralph("fix", str(repo), "--max-iterations", "1", "--json").stdout)
    assert 0 < data["baseline_s"] <= data["wall_s"]


def test_a_run_its_budget_stopped_says_what_it_tried_and_what_to_try_next(make_repo):
    repo = make_repo(UNFIXABLE)
    proc = run_ralph("fix", str(repo), "--max-iterations", "1")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "still failing: tests/test_calc.py::test_add" in out
    spent = next(line for line in out.splitlines() if line.startswith("stopped by its budget"))
    assert spent.startswith("stopped by its budget (--max-iterations) after 1 iteration: ")
    assert re.search(r"\d+ candidates tried \(mutation \d+\), edits by kind: \w+ \d+", spent), spent
    assert spent.endswith("remaining error 1 -> 1")
    assert "next: more iterations (--max-iterations 2), or a model: --drafter PROVIDER/MODEL" in out


@pytest.mark.slow
def test_an_accept_whose_gate_is_pending_says_so_and_its_undo_shows(make_repo, tmp_path):
    from tests.test_background_gate import BREAK_THEN_FIX, _replay

    repo = make_repo(BUGGY_WINDOWS)
    drafter = _replay(tmp_path, *BREAK_THEN_FIX)
    proc = run_ralph("fix", str(repo), "--drafter", drafter, "--candidates", "1", "--background-gate")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("#1 "))
    assert "accepted, gate pending: remaining error 1 -> 0" in lines[first]
    assert lines[first + 1].startswith("ralph: iteration 1's edit failed its background gate and is undone")
    assert "test_double" in lines[first + 1]
    assert "accepted, gate pending" in lines[first + 2] and lines[first + 2].startswith("#2 ")
    gated = run_ralph("fix", str(make_repo(BUGGY_WINDOWS, name="in-line")), "--no-background-gate")
    assert "accepted: remaining error 1 -> 0" in gated.stdout and "pending" not in gated.stdout


@pytest.mark.slow
def test_json_names_what_still_fails(make_repo):
    repo = make_repo(UNFIXABLE)
    proc = run_ralph("fix", str(repo), "--json", "--max-iterations", "1", "--check", "test -f NOTES")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["remaining"] == 2
    assert data["still_failing"] == {
        "tests": ["tests/test_calc.py::test_add"],
        "regressed": [],
        "checks": ["test -f NOTES"],
        "diagnostics": [],
        "syntax_errors": [],
    }
    fixed = json.loads(run_ralph("fix", str(make_repo(BUGGY_WINDOWS, name="fixable")), "--json").stdout)
    assert fixed["outcome"] == "goal" and not any(fixed["still_failing"].values())


class Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def iteration(self, record) -> None:
        pass

    def notice(self, text: str) -> None:
        pass

    def progress(self, text: str) -> None:
        self.lines.append(text)


@pytest.mark.slow
def test_the_baseline_shows_how_far_it_is_and_announces_a_test_nearing_its_limit(make_repo):
    slow = "import time\n\n\ndef test_slow():\n    time.sleep(7)\n"
    repo = make_repo({**BUGGY_WINDOWS, "tests/test_slow.py": slow})
    view = Recorder()
    fix(repo, RunConfig(test_timeout_s=12, max_iterations=1, candidates=1), view=view)
    baseline = [line for line in view.lines if line.startswith("verifying the starting state · ")]
    assert any(re.search(r"tests \d/3 [▰▱]{20}", line) for line in baseline), baseline
    announced = r"tests/test_slow.py::test_slow running for \d+ s \(its limit: 12 s\)"
    assert any(re.search(announced, line) for line in baseline), baseline


def test_the_live_line_says_which_candidate_of_how_many_the_time_and_the_step(make_repo):
    view = Recorder()
    outcome = fix(make_repo(BUGGY_WINDOWS), RunConfig(candidates=4, background_gate=False), view=view)
    assert outcome.result.outcome == "goal"
    first = next(line for line in view.lines if line.startswith("#"))  # (the baseline's lines come first)
    assert first.startswith("#1 mutation 1/") and "s · " in first
    assert any(line.endswith(" · gate") for line in view.lines)
    assert any(line.endswith("tests + mypy") or line.endswith(" · tests") for line in view.lines)


def test_ralph_clean_deletes_merged_branches_and_keeps_unmerged_ones(make_repo):
    repo = make_repo({"a.py": "x = 1\n"})
    git(repo, "branch", "ralph/merged")
    git(repo, "checkout", "-q", "-b", "ralph/unmerged")
    (repo / "a.py").write_text("x = 2\n")
    git(repo, "commit", "-qam", "work")
    git(repo, "checkout", "-q", "main")
    proc = run_ralph("clean", str(repo))
    assert proc.returncode == 0, proc.stderr
    assert "deleted ralph/merged (merged)" in proc.stdout and "kept ralph/unmerged" in proc.stdout
    assert git(repo, "branch", "--list", "ralph/*").split() == ["ralph/unmerged"]
    assert (
        "would delete ralph/unmerged"
        in run_ralph("clean", str(repo), "--older-than", "0", "--force", "--dry-run").stdout
    )
    run_ralph("clean", str(repo), "--older-than", "0", "--force")
    assert git(repo, "branch", "--list", "ralph/*").strip() == ""


@pytest.mark.slow
def test_ralph_doctor_is_a_readable_table_and_says_what_auto_is(tmp_path):
    proc = run_ralph("doctor", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "{" not in proc.stdout  # no raw dicts or JSON in a cell
    assert "drafter_resolves_to" in proc.stdout and "mutation" in proc.stdout
    assert "problem:" in proc.stdout or "no problems found" in proc.stdout
    data = json.loads(run_ralph("doctor", str(tmp_path), "--json").stdout)
    assert data["drafter_resolves_to"] == "mutation" and isinstance(data["problems"], list)


@pytest.mark.slow
def test_report_compare_with_one_drafter_says_so_and_plot_says_where(make_repo, tmp_path):
    pytest.importorskip("matplotlib")
    outcome = fix(make_repo(BUGGY_WINDOWS), RunConfig(), view=Recorder())
    png = tmp_path / "plot.png"
    proc = run_ralph("report", str(outcome.trace), "--compare", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert "nothing to compare: every run used the same drafters (mutation)" in proc.stdout
    assert f"plot written to {png}" in proc.stdout.replace("\n", "")
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_every_command_help_shows_its_defaults():
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    for command in (["fix"], ["ci"], ["report"], ["bench", "verify"], ["clean"]):
        out = subprocess.run(
            [sys.executable, "-m", "ralph", *command, "--help"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        ).stdout
        assert "<bool>" not in out, command
    fix_help = subprocess.run(
        [sys.executable, "-m", "ralph", "fix", "--help"], capture_output=True, text=True, env=env
    ).stdout
    assert "default" in fix_help.lower()


def piped(*args: str, into: str) -> subprocess.CompletedProcess[str]:
    """`ralph ARGS | INTO` in a shell, with ralph's exit status (not the reader's)."""
    script = f'"$@" | {into}; exit "${{PIPESTATUS[0]}}"'
    command = ["bash", "-c", script, "ralph", sys.executable, "-m", "ralph", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("args, into", [((), "head -1"), (("--json",), "true")])
def test_a_reader_that_stops_reading_changes_nothing_of_the_run(make_repo, args, into):
    """`ralph fix | head -1`: the output the reader did not take is dropped, quietly, and the run goes
    on to its fix, its branch and its exit code as if it had been read to the end."""
    repo = make_repo(BUGGY_WINDOWS)
    (repo / "notes.txt").write_text("the user's own work\n")
    status = git(repo, "status", "--porcelain")
    proc = piped("fix", str(repo), *args, into=into)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr, proc.stderr
    if into == "head -1":
        assert proc.stdout == f"ralph fix {repo}\n"
    [branch] = git(repo, "branch", "--list", "ralph/*", "--format=%(refname:short)").split()
    assert "range(len(xs) - k + 1)" in git(repo, "show", f"{branch}:windows.py")
    assert git(repo, "status", "--porcelain") == status


@pytest.mark.slow
def test_the_summary_is_never_wrapped_or_cut_when_the_output_is_not_a_terminal(make_repo):
    repo = make_repo(BUGGY_WINDOWS, name="a-repository-with-a-long-name-" + "x" * 70)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run(
        [sys.executable, "-m", "ralph", "fix", str(repo)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    trace = next(repo.glob(".ralph/runs/*/trace.jsonl"))
    assert len(str(trace)) > 100
    assert any(str(trace) in line for line in out.stdout.splitlines()), out.stdout
    # In a narrow terminal (or $COLUMNS) the table fits the width: long values fold, nothing is cut.
    narrow = subprocess.run(
        [sys.executable, "-m", "ralph", "fix", str(repo)],
        capture_output=True,
        text=True,
        env={**env, "COLUMNS": "70"},
        timeout=120,
        check=False,
    )
    assert narrow.returncode == 0, narrow.stderr
    table = [line for line in narrow.stdout.splitlines() if line[:1] in "┌│├└"]
    assert table and all(len(line) <= 70 for line in table), narrow.stdout
    assert "…" not in narrow.stdout
