"""`--apply` writes exactly the files whose contents the fix changed: never another file the branch
holds (an untracked file copied along, a path git ignores), never through a symlink."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ralph.branch import RalphBranch
from ralph.domain.errors import RalphError
from ralph.gitops import commit_changes, snapshot
from tests.conftest import BUGGY_WINDOWS, git, run_ralph

FIXED = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)")
EVIL = ".venv/lib/python3.11/site-packages/evil.py"


def branch_with(repo: Path, files: dict[str, bytes | None]) -> RalphBranch:
    """A ralph branch built by hand: one commit of `files` on the snapshot of `repo` as it is now."""
    snap = snapshot(repo)
    tip = commit_changes(snap.toplevel, snap.commit, files, "by hand")
    return RalphBranch(snap, "ralph/by-hand", tip=tip)


def test_apply_writes_only_the_fixed_file_not_an_ignored_or_an_unchanged_one(make_repo):
    repo = make_repo({**BUGGY_WINDOWS, ".gitignore": ".venv/\n"})
    (repo / "windows.py").chmod(0o755)
    git(repo, "commit", "-q", "-am", "executable")
    (repo / ".venv" / "lib").mkdir(parents=True)  # the user's own environment
    (repo / "notes.txt").write_text("mine\n")  # untracked: copied into the workspace, not committed
    before = (repo / "notes.txt").stat()
    branch = branch_with(
        repo,
        {"windows.py": FIXED.encode(), EVIL: b"import os\n", "notes.txt": b"mine\n"},
    )
    assert set(branch.changed_paths()) == {"windows.py", EVIL, "notes.txt"}  # all on the branch
    notices: list[str] = []
    assert branch.apply_to_working_tree(notices.append) == ["windows.py"]
    assert (repo / "windows.py").read_text() == FIXED
    assert (repo / "windows.py").stat().st_mode & 0o777 == 0o755
    assert not (repo / EVIL).exists() and not (repo / ".venv" / "lib" / "python3.11").exists()
    after = (repo / "notes.txt").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten
    assert len(notices) == 1 and EVIL in notices[0]


def test_apply_never_writes_through_a_symlinked_folder(make_repo, tmp_path):
    repo = make_repo({"pkg/mod.py": "x = 1\n", "tests/test_mod.py": "def test_x():\n    pass\n"})
    branch = branch_with(repo, {"pkg/mod.py": b"x = 2\n"})
    outside = tmp_path / "outside"
    (repo / "pkg").rename(outside)  # the folder swapped for a link to a copy elsewhere
    (repo / "pkg").symlink_to(outside)
    with pytest.raises(RalphError, match="symlink"):
        branch.apply_to_working_tree()
    assert (outside / "mod.py").read_text() == "x = 1\n"


def test_apply_of_a_rename_removes_the_old_file(make_repo):
    repo = make_repo({"old.py": "def f():\n    return 1\n", "tests/test_f.py": "def test_f():\n    pass\n"})
    branch = branch_with(repo, {"old.py": None, "new.py": b"def f():\n    return 1\n"})
    assert branch.apply_to_working_tree() == ["new.py", "old.py"]
    assert not (repo / "old.py").exists() and (repo / "new.py").read_text() == "def f():\n    return 1\n"


@pytest.mark.slow
def test_a_fix_that_also_plants_a_file_in_the_venv_never_reaches_the_working_tree(make_repo, tmp_path):
    repo = make_repo({**BUGGY_WINDOWS, ".gitignore": ".venv/\n"})
    (repo / ".venv" / "lib").mkdir(parents=True)
    replay = tmp_path / "edits.jsonl"
    hostile = {"description": "fix", "files": {"windows.py": FIXED, EVIL: "import os\n"}}
    replay.write_text(json.dumps(hostile) + "\n")
    proc = run_ralph("fix", str(repo), "--drafter", f"replay:{replay}", "--candidates", "1", "--apply")
    assert "Traceback" not in proc.stderr
    assert not (repo / EVIL).exists()
    assert not any(p.is_file() for p in (repo / ".venv").rglob("*"))
    if proc.returncode == 0:  # accepted (no stage refused it): only the fix was applied
        assert (repo / "windows.py").read_text() == FIXED
        assert git(repo, "status", "--porcelain", "--untracked-files=all") == " M windows.py\n"
    else:
        assert (repo / "windows.py").read_text() == BUGGY_WINDOWS["windows.py"]
    assert os.listdir(repo / ".venv" / "lib") == []
