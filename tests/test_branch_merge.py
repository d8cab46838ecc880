"""The branch a finished run leaves: one commit with the whole fix, and an ending whose commands take it
in where the user stands (a clean tree: `git merge`; uncommitted changes: a patch onto them). Through
the real entry point, on real repositories."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import git, run_ralph

TWO_BUGS = {
    "shapes.py": ("def area(w, h):\n    return w + h\n\n\ndef perimeter(w, h):\n    return 2 * (w - h)\n"),
    "tests/test_shapes.py": (
        "from shapes import area, perimeter\n"
        "\n"
        "\n"
        "def test_area():\n"
        "    assert area(3, 4) == 12\n"
        "\n"
        "\n"
        "def test_perimeter():\n"
        "    assert perimeter(3, 4) == 14\n"
    ),
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
}


def _next_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("next: "))


def _run_suggested(line: str, cwd) -> None:
    """Run the command the ending suggests for taking the fix, as a user pastes it."""
    command = line.split("   |   ", 1)[1]
    proc = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, command + "\n" + proc.stderr


@pytest.mark.slow
def test_a_clean_tree_gets_one_commit_on_head_that_merges(make_repo):
    repo = make_repo(TWO_BUGS)
    head = git(repo, "rev-parse", "HEAD").strip()
    proc = run_ralph("fix", str(repo), "--no-sandbox", "--candidates", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    branch = next(
        b.strip() for b in git(repo, "branch", "--format=%(refname:short)").split() if "ralph/" in b
    )
    assert git(repo, "rev-list", "--count", f"{head}..{branch}").strip() == "1"  # two steps, one commit
    assert git(repo, "rev-parse", f"{branch}^").strip() == head
    message = git(repo, "log", "-1", "--format=%B", branch)
    assert "Steps:" in message and "tests/test_shapes.py::test_area" in message, message
    assert "tests/test_shapes.py::test_perimeter" in message
    line = _next_line(proc.stdout)
    assert line == f"next: git -C {repo} show {branch}   |   git -C {repo} merge {branch}"
    _run_suggested(line, cwd=repo.parent)  # what the ending says works, wherever it is run from
    assert "w * h" in (repo / "shapes.py").read_text() and "w + h" in (repo / "shapes.py").read_text()


@pytest.mark.slow
def test_with_uncommitted_changes_the_suggested_patch_applies_onto_them(make_repo):
    repo = make_repo(TWO_BUGS)
    head = git(repo, "rev-parse", "HEAD").strip()
    source = repo / "shapes.py"
    source.write_text("# the user's own edit, not committed\n" + source.read_text())  # the file ralph fixes
    (repo / "notes.txt").write_text("untracked\n")
    git(repo, "add", "notes.txt")  # staged: the index must stay as it is
    staged_before = git(repo, "diff", "--cached")
    proc = run_ralph("fix", str(repo), "--no-sandbox", "--candidates", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    branch = next(
        b.strip() for b in git(repo, "branch", "--format=%(refname:short)").split() if "ralph/" in b
    )
    snapshot = git(repo, "rev-parse", f"{branch}^").strip()
    assert snapshot != head and git(repo, "rev-parse", f"{snapshot}^").strip() == head
    assert git(repo, "rev-list", "--count", f"{snapshot}..{branch}").strip() == "1"
    line = _next_line(proc.stdout)
    assert "git merge" not in line  # it would refuse: the user's changes are in the way
    assert line.startswith(f"next: git -C {repo} show {branch}   |   git -C ")
    _run_suggested(line, cwd=repo.parent)
    text = source.read_text()
    assert text.startswith("# the user's own edit") and "w * h" in text and "2 * (w + h)" in text
    assert git(repo, "diff", "--cached") == staged_before
    assert git(repo, "rev-parse", "HEAD").strip() == head


@pytest.mark.slow
def test_a_fix_of_a_file_the_user_never_added_is_restored_from_the_branch(make_repo):
    """An untracked file is not in the branch's base, so the branch adds it whole: `git merge` and a
    patch would both refuse it; the ending restores it from the branch, and the rest as a patch."""
    repo = make_repo(TWO_BUGS)
    source = repo / "shapes.py"
    text = source.read_text()
    git(repo, "rm", "-q", "--cached", "shapes.py")
    git(repo, "commit", "-qm", "shapes.py not tracked yet")
    source.write_text(text)
    proc = run_ralph("fix", str(repo), "--no-sandbox", "--candidates", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = _next_line(proc.stdout)
    assert "merge" not in line and "restore --source=" in line, line
    _run_suggested(line, cwd=repo.parent)
    fixed = source.read_text()
    assert "w * h" in fixed and "2 * (w + h)" in fixed
    assert git(repo, "status", "--porcelain", "--untracked-files=all").split() == ["??", "shapes.py"]
