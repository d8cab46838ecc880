"""Adversarial cases end to end: hostile edits are rejected whole, hostile tests reach nothing of the
user's, and a user's concurrent edit is never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.domain.candidate import Candidate, FileChange
from ralph.domain.errors import UnsafePath
from ralph.domain.protocols import DraftContext
from ralph.sandboxes.bwrap import available
from ralph.sandboxes.workspace import Workspace
from ralph.session import fix
from ralph.trace import read_trace
from ralph.view import QuietView
from tests.conftest import BUGGY_WINDOWS, git

needs_bwrap = pytest.mark.skipif(available() is not None, reason=f"bubblewrap cannot run here: {available()}")
FIXED = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)")


@pytest.mark.slow
def test_a_patch_that_creates_a_symlink_then_writes_through_it_is_rejected_whole(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    outside = tmp_path / "outside"
    outside.mkdir()
    diff = (
        "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n"
        f"+{outside}\n\\ No newline at end of file\n"
        "diff --git a/link/evil.py b/link/evil.py\nnew file mode 100644\n--- /dev/null\n+++ b/link/evil.py\n"
        "@@ -0,0 +1 @@\n+owned = True\n"
    )
    replay = tmp_path / "edits.jsonl"
    replay.write_text(json.dumps({"description": "symlink trick", "diff": diff}) + "\n")
    outcome = fix(repo, RunConfig(drafter=f"replay:{replay}"), view=QuietView(notices=False))
    iteration = next(r for r in read_trace(outcome.trace) if r["type"] == "iteration")
    assert iteration["candidates"][0]["verdict"] == "rejected"
    assert "symlinks" in iteration["candidates"][0]["reason"]
    assert list(outside.iterdir()) == []
    assert outcome.branch is None


def test_a_path_that_is_both_a_file_and_a_directory_is_rejected_whole(tmp_path):
    (tmp_path / "keep.py").write_text("original\n")
    ws = Workspace(tmp_path)
    changes = [
        FileChange("keep.py", "original\n", "changed\n"),
        FileChange("a", None, "x"),
        FileChange("a/b", None, "y"),
    ]
    with pytest.raises(UnsafePath):
        ws.apply(changes)
    assert (tmp_path / "keep.py").read_text() == "original\n"  # the first write was undone
    assert not (tmp_path / "a").is_file()


@pytest.mark.slow
@needs_bwrap
def test_a_test_that_plants_hooks_in_the_users_repository_reaches_nothing(make_repo, tmp_path):
    marker = tmp_path / "hook-ran"
    repo = make_repo(BUGGY_WINDOWS)
    user_git = repo / ".git"
    hostile = f"""
import os, subprocess
def _attack():
    for name in ("post-commit", "reference-transaction", "pre-commit"):
        try:
            with open({str(user_git)!r} + "/hooks/" + name, "w") as f:
                f.write("#!/bin/sh\\necho ran >> {marker}\\n")
            os.chmod({str(user_git)!r} + "/hooks/" + name, 0o755)
        except OSError:
            pass
    subprocess.run(["git", "-C", {str(repo)!r}, "config", "core.fsmonitor", "touch {marker}"], check=False)
    subprocess.run(["rm", "-rf", {str(user_git)!r}], check=False)
_attack()
"""
    (repo / "conftest.py").write_text(hostile)
    git(repo, "add", "conftest.py")
    git(repo, "commit", "-q", "-m", "a hostile conftest")
    config_before = (user_git / "config").read_text()
    hooks_before = sorted(p.name for p in (user_git / "hooks").iterdir())
    outcome = fix(repo, RunConfig(), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    assert (user_git / "config").read_text() == config_before
    assert sorted(p.name for p in (user_git / "hooks").iterdir()) == hooks_before
    assert not marker.exists()
    assert git(repo, "show", f"{outcome.branch}:windows.py") == FIXED


class EditsTheUsersFileThenFixes:
    """Stands in for a user who edits windows.py in their editor while ralph runs."""

    name = "scripted"

    def draft(self, context: DraftContext, n: int) -> list[Candidate]:
        user_file = Path(USER_REPO[0]) / "windows.py"
        user_file.write_text(user_file.read_text() + "# the user's edit\n")
        before = (context.project / "windows.py").read_text()
        return [Candidate(self.name, "fix", (FileChange("windows.py", before, FIXED),))]


USER_REPO: list[str] = []


@pytest.mark.slow
def test_apply_never_overwrites_a_file_the_user_edited_during_the_run(make_repo):
    import tests.test_adversarial as loaded  # the module the registry imports the drafter from

    repo = make_repo(BUGGY_WINDOWS)
    loaded.USER_REPO[:] = [str(repo)]
    outcome = fix(
        repo,
        RunConfig(drafter="tests.test_adversarial:EditsTheUsersFileThenFixes"),
        view=QuietView(notices=False),
        apply=True,
    )
    assert outcome.result.outcome == "goal" and outcome.apply_refused and outcome.exit_code == 1
    assert (repo / "windows.py").read_text().endswith("# the user's edit\n")
    assert git(repo, "show", f"{outcome.branch}:windows.py") == FIXED
