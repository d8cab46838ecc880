"""The pre-commit hooks, through the real pre-commit framework (`pre-commit try-repo`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, run_ralph

RALPH_ROOT = Path(__file__).parent.parent
BUGGY = {
    "calc.py": "def double(x):\n    return x * 3\n",
    "test_calc.py": "from calc import double\n\n\ndef test_double():\n    assert double(2) == 4\n",
}


@pytest.mark.slow
def test_both_hooks_through_pre_commit_try_repo(make_repo, tmp_path):
    """One install of ralph into pre-commit's environment, both hooks on a staged bug: the check fails
    the commit without editing; the fix writes the fix into the working tree and fails so the user
    re-stages, leaving the index as the user staged it."""
    repo = make_repo(BUGGY, commit=False)
    git(repo, "add", "-A")
    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or "pre-commit"
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [pre_commit, "try-repo", str(RALPH_ROOT), "--files", "calc.py", "--verbose"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "ralph check" in out and "test_calc.py::test_double: failed" in out
    assert "ralph fix" in out and "review and re-stage" in out
    assert (repo / "calc.py").read_text() == "def double(x):\n    return x * 2\n"
    assert git(repo, "show", ":calc.py") == BUGGY["calc.py"]


@pytest.mark.slow
def test_fix_never_writes_a_file_with_unstaged_changes(make_repo):
    repo = make_repo(BUGGY, commit=False)
    git(repo, "add", "-A")
    (repo / "calc.py").write_text("def double(x):\n    return x * 3  # unstaged edit\n")
    proc = run_ralph("precommit", "--fix", "calc.py", cwd=repo)
    assert proc.returncode != 0
    assert (repo / "calc.py").read_text() == "def double(x):\n    return x * 3  # unstaged edit\n"
    assert "unstaged" in proc.stderr
    # The fix lives on its branch alone: that one stays, named.
    [branch] = git(repo, "branch", "--list", "ralph/*", "--format=%(refname:short)").split()
    assert f"branch {branch}" in proc.stderr
    assert "x * 2" in git(repo, "show", f"{branch}:calc.py")


@pytest.mark.slow
def test_a_fix_written_into_the_working_tree_leaves_no_branch_behind(make_repo):
    """The hook runs at every commit: a run whose fix the working tree holds deletes its branch."""
    repo = make_repo({**BUGGY, "notes.txt": "mine\n"})
    (repo / "calc.py").write_text("def double(x):\n    return x * 3 + 0\n")
    git(repo, "add", "calc.py")
    (repo / "notes.txt").write_text("mine, not staged\n")
    index = git(repo, "diff", "--cached")
    for _ in range(2):
        proc = run_ralph("precommit", "--fix", "calc.py", cwd=repo)
        assert proc.returncode == 1, proc.stderr  # fixed: review and re-stage
        assert "ralph: fixed calc.py; review and re-stage" in proc.stderr
        assert git(repo, "branch", "--list", "ralph/*") == ""
        assert git(repo, "diff", "--cached") == index  # the index as the user staged it
        git(repo, "checkout", "--", "calc.py")  # the user throws the fix away; the next commit tries again
    assert (repo / "notes.txt").read_text() == "mine, not staged\n"


def test_check_passes_clean_files_and_leaves_no_caches(make_repo):
    repo = make_repo({**BUGGY, "calc.py": "def double(x):\n    return x * 2\n"})
    proc = run_ralph("precommit", "calc.py", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert git(repo, "status", "--porcelain", "--ignored") == ""


@pytest.mark.slow
def test_fix_judges_what_check_judges_and_lints_only_the_staged_files(make_repo):
    files = {
        "calc.py": "import os\n\n\ndef double(x):\n    return x * 2\n",
        "other.py": "import sys\n",  # not given to the hook: never touched
        "test_calc.py": BUGGY["test_calc.py"],
    }
    repo = make_repo(files, commit=False)
    git(repo, "add", "-A")
    check = run_ralph("precommit", "--check", "calc.py", cwd=repo)
    assert check.returncode == 1 and "F401" in check.stderr
    fixed = run_ralph("precommit", "--fix", "calc.py", cwd=repo)
    assert fixed.returncode == 1, fixed.stderr  # fixed: review and re-stage
    assert (repo / "calc.py").read_text().lstrip("\n") == "def double(x):\n    return x * 2\n"
    assert (repo / "other.py").read_text() == "import sys\n"
    assert run_ralph("precommit", "--check", "calc.py", cwd=repo).returncode == 0
