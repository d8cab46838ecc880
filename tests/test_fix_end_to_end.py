"""`ralph fix` on small real repositories: the loop, the branch, the trace, the user's files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.session import fix
from ralph.trace import read_trace
from ralph.view import QuietView
from tests.conftest import BUGGY_WINDOWS, git, run_ralph

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_fix(repo: Path, **config: object) -> object:
    return fix(repo, RunConfig(**config), view=QuietView())  # type: ignore[arg-type]


def branch_passes_its_tests(repo: Path, branch: str, tmp_path: Path) -> bool:
    """Check out `branch` somewhere else and run its test suite for real."""
    export = tmp_path / "export"
    git(repo, "worktree", "add", "-q", str(export), branch)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=export, check=False
    )
    git(repo, "worktree", "remove", "--force", str(export))
    return proc.returncode == 0


@pytest.mark.slow
def test_fixing_run_ends_on_a_green_ralph_branch(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    outcome = run_fix(repo)
    assert outcome.result.outcome == "goal"
    assert outcome.exit_code == 0
    assert outcome.branch.startswith("ralph/")
    assert "range(len(xs) - k + 1)" in git(repo, "show", f"{outcome.branch}:windows.py")
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert branch_passes_its_tests(repo, outcome.branch, tmp_path)
    message = git(repo, "log", "-1", "--format=%B", outcome.branch)
    assert "Drafter: mutation" in message and "tests/test_windows.py::test_every_window" in message


@pytest.mark.slow
def test_regressing_candidate_is_rolled_back(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    bad = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)").replace("x * 2", "x * 3")
    good = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)")
    replay = tmp_path / "edits.jsonl"
    replay.write_text(
        json.dumps({"description": "fix windows, break double", "files": {"windows.py": bad}})
        + "\n"
        + json.dumps({"description": "fix windows", "files": {"windows.py": good}})
        + "\n"
    )
    # The gate in line (tests/test_background_gate.py has the same candidates gated beside the loop).
    outcome = run_fix(repo, drafter=f"replay:{replay}", candidates=1, background_gate=False)
    assert outcome.result.outcome == "goal"
    records = read_trace(outcome.trace)
    first, second = (r for r in records if r["type"] == "iteration")
    rejected = first["candidates"][0]
    assert rejected["verdict"] == "rejected"
    assert "test_double" in rejected["reason"]
    assert first["remaining_after"] == first["remaining_before"] == 1
    assert second["candidates"][0]["verdict"] == "accepted"
    assert git(repo, "show", f"{outcome.branch}:windows.py") == good
    assert git(repo, "rev-list", "--count", f"main..{outcome.branch}").strip() == "1"


@pytest.mark.slow
def test_user_changes_are_preserved_byte_for_byte_and_the_index_is_unchanged(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    (repo / "notes.txt").write_text("committed\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "notes")
    (repo / "notes.txt").write_text("staged edit\n")
    git(repo, "add", "notes.txt")
    (repo / "notes.txt").write_text("staged edit\nthen an unstaged one\n")
    (repo / "scratch.py").write_text("UNTRACKED = True\n")
    (repo / "tests" / "test_scratch.py").write_text(
        "from scratch import UNTRACKED\n\ndef test_u():\n    assert UNTRACKED\n"
    )
    before_files = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    before_index = (repo / ".git" / "index").read_bytes()
    before_head = git(repo, "rev-parse", "HEAD")
    before_status = git(repo, "status", "--porcelain")

    outcome = run_fix(repo)

    assert outcome.result.outcome == "goal"
    after_files = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert {p: b for p, b in after_files.items() if ".ralph" not in p.parts} == before_files
    assert (repo / ".git" / "index").read_bytes() == before_index
    assert git(repo, "rev-parse", "HEAD") == before_head
    assert git(repo, "status", "--porcelain") == before_status
    # The fix was made on top of the user's uncommitted changes to tracked files, which the branch
    # carries; the untracked files were used by the tests, not committed.
    assert git(repo, "show", f"{outcome.branch}:notes.txt") == "staged edit\nthen an unstaged one\n"
    assert "scratch.py" not in git(repo, "ls-tree", "-r", "--name-only", outcome.branch).split()
    assert outcome.untracked == ("scratch.py", "tests/test_scratch.py")


@pytest.mark.slow
def test_apply_writes_the_fix_into_the_working_tree_only(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    before_index = (repo / ".git" / "index").read_bytes()
    outcome = fix(repo, RunConfig(), view=QuietView(), apply=True)
    assert outcome.applied == ["windows.py"]
    assert "range(len(xs) - k + 1)" in (repo / "windows.py").read_text()
    assert (repo / ".git" / "index").read_bytes() == before_index


@pytest.mark.slow
def test_budget_stops_the_run_with_exit_1_and_keeps_progress(make_repo):
    files = dict(BUGGY_WINDOWS)
    files["windows.py"] = files["windows.py"].replace("x * 2", "x + 2")  # a second bug
    repo = make_repo(files)
    outcome = run_fix(repo, max_iterations=1, candidates=1)
    assert outcome.result.outcome == "max_iterations"
    assert outcome.exit_code == 1
    assert outcome.result.iterations == 1


def test_seconds_budget_stops_the_run(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    outcome = run_fix(repo, max_seconds=0.001)
    assert outcome.result.outcome == "max_seconds"
    assert outcome.exit_code == 1


def test_run_stalls_when_the_drafter_has_nothing_left(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    replay = tmp_path / "edits.jsonl"
    replay.write_text(
        json.dumps({"files": {"windows.py": "def sliding_sums(xs, k):\n    return []\n"}}) + "\n"
    )
    outcome = run_fix(repo, drafter=f"replay:{replay}")
    assert outcome.result.outcome == "stalled"
    assert outcome.exit_code == 1
    assert outcome.branch is None


def test_narrowed_targets_ignore_other_failures(make_repo):
    files = dict(BUGGY_WINDOWS)
    files["tests/test_other.py"] = "def test_unrelated_failure():\n    assert False\n"
    repo = make_repo(files)
    outcome = run_fix(repo, tests=["tests/test_windows.py"])
    assert outcome.result.outcome == "goal"


@pytest.mark.slow
@pytest.mark.parametrize(
    "example", sorted(p.name for p in EXAMPLES.iterdir() if (p / "pyproject.toml").exists())
)
def test_every_example_is_fixed_offline(example, tmp_path):
    repo = tmp_path / example
    shutil.copytree(EXAMPLES / example, repo)
    git(repo, "init", "-q", "-b", "main")
    outcome = run_fix(repo)
    assert outcome.result.outcome == "goal", read_trace(outcome.trace)[-1]


@pytest.mark.slow
def test_json_summary_from_the_command_line(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    proc = run_ralph("fix", str(repo), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["outcome"] == "goal"
    assert summary["branch"].startswith("ralph/")
    assert Path(summary["trace"]).exists()
    assert {"iterations", "wall_s"} <= summary.keys()


@pytest.mark.slow
def test_a_bug_that_makes_the_baseline_loop_forever_is_fixed_in_seconds(make_repo):
    files = {
        "countdown.py": "def steps(n):\n    count = 0\n    while n > 0:\n        n += 1\n        count += 1\n    return count\n",
        "tests/test_countdown.py": "from countdown import steps\n\n\ndef test_steps():\n    assert steps(3) == 3\n",
    }
    outcome = run_fix(make_repo(files), test_timeout_s=1.0, max_iterations=6)
    assert outcome.result.outcome == "goal"
    assert outcome.result.wall_s < 60


@pytest.mark.slow
def test_the_ending_says_what_changed_and_what_to_run_next(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    proc = run_ralph("fix", str(repo), "--no-sandbox")
    assert proc.returncode == 0, proc.stderr
    assert "windows.py | 2 +-" in proc.stdout and "1 file changed" in proc.stdout
    assert f"next: git -C {repo} show ralph/" in proc.stdout and f"git -C {repo} merge ralph/" in proc.stdout
    clean = make_repo({"tests/test_ok.py": "def test_ok():\n    pass\n"}, name="clean")
    proc = run_ralph("fix", str(clean), "--no-sandbox")
    assert proc.returncode == 0 and "nothing to fix" in proc.stdout
