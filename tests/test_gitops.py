"""Snapshots never touch the user's index, even when they hold its lock or have no commit yet."""

from __future__ import annotations

from ralph.gitops import materialize, snapshot
from tests.conftest import git


def test_snapshot_of_an_unborn_branch(make_repo, tmp_path):
    repo = make_repo({"a.py": "A = 1\n"}, commit=False)
    snap = snapshot(repo)
    assert snap.head is None
    materialize(snap, tmp_path / "ws")
    assert (tmp_path / "ws" / "a.py").read_text() == "A = 1\n"
    assert not (tmp_path / "ws" / ".git").exists()


def test_snapshot_while_the_user_holds_index_lock(make_repo):
    repo = make_repo({"a.py": "A = 1\n"})
    (repo / "a.py").write_text("A = 2\n")
    lock = repo / ".git" / "index.lock"
    lock.write_text("held by the user")
    index = (repo / ".git" / "index").read_bytes()
    snap = snapshot(repo)
    assert git(repo, "show", f"{snap.commit}:a.py") == "A = 2\n"
    assert lock.read_text() == "held by the user"
    assert (repo / ".git" / "index").read_bytes() == index


def test_ignored_files_stay_out_and_subdirectories_are_projects(make_repo, tmp_path):
    repo = make_repo({".gitignore": "*.log\n", "pkg/a.py": "A = 1\n"})
    (repo / "debug.log").write_text("noise")
    snap = snapshot(repo / "pkg")
    assert snap.subdir == "pkg"
    assert snap.commit == snap.head  # nothing uncommitted that git does not ignore
    materialize(snap, tmp_path / "ws")
    assert not (tmp_path / "ws" / "debug.log").exists()


def test_ralph_never_runs_hooks_or_fsmonitor_programs(make_repo, tmp_path):
    from ralph.config import RunConfig
    from ralph.session import fix
    from ralph.view import QuietView
    from tests.conftest import BUGGY_WINDOWS

    repo = make_repo(BUGGY_WINDOWS)
    marker = tmp_path / "executed"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\necho $0 >> {marker}\n")
    script.chmod(0o755)
    for hook in ("reference-transaction", "post-commit", "pre-commit", "post-checkout", "post-index-change"):
        (repo / ".git" / "hooks" / hook).write_text(script.read_text())
        (repo / ".git" / "hooks" / hook).chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(script))
    outcome = fix(repo, RunConfig(), view=QuietView())
    assert outcome.branch is not None
    assert not marker.exists()
