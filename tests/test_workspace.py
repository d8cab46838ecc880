"""The workspace: edits land where they should, roll back exactly, never reuse stale bytecode."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ralph.candidate import FileChange
from sandboxes.workspace import UnsafePath, Workspace


def test_same_size_edits_are_not_hidden_by_stale_bytecode(tmp_path):
    (tmp_path / "m.py").write_text("X = 1\n")
    ws = Workspace(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    seen = []
    for value in ("2", "3", "1"):
        before = (tmp_path / "m.py").read_text()
        ws.apply([FileChange("m.py", before, f"X = {value}\n")])
        out = subprocess.run(
            [sys.executable, "-c", "import m; print(m.X)"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        seen.append(out.stdout.strip())
    assert seen == ["2", "3", "1"]
    assert list((tmp_path / "__pycache__").iterdir())  # bytecode was written and still never went stale


def test_revert_restores_contents_and_deletes_new_files(tmp_path):
    (tmp_path / "a.py").write_text("old\n")
    ws = Workspace(tmp_path)
    changes = [FileChange("a.py", "old\n", "new\n"), FileChange("pkg/new.py", None, "x = 1\n")]
    ws.apply(changes)
    assert (tmp_path / "pkg" / "new.py").exists()
    ws.revert(changes)
    assert (tmp_path / "a.py").read_text() == "old\n"
    assert not (tmp_path / "pkg" / "new.py").exists()


@pytest.mark.parametrize("path", ["../escape.py", "/etc/passwd", ".git/hooks/pre-commit", "sub/.GIT/config"])
def test_paths_outside_the_project_or_into_git_are_refused(tmp_path, path):
    with pytest.raises(UnsafePath):
        Workspace(tmp_path).apply([FileChange(path, None, "x")])


def test_writes_through_a_symlinked_directory_are_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "link").symlink_to(outside)
    with pytest.raises(UnsafePath):
        Workspace(project).apply([FileChange("link/evil.py", None, "x")])
    assert not (outside / "evil.py").exists()
