"""The workspace: edits land where they should, roll back exactly, never reuse stale bytecode."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from ralph.domain.candidate import FileChange
from ralph.domain.errors import UnsafePath
from ralph.sandboxes.workspace import Workspace


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


def _captured(tmp_path):
    from tests.conftest import write_files

    root = tmp_path / "ws"
    write_files(root, {"pkg/mod.py": "x = 1\n", "vendor/.git/HEAD": "ref\n", "run.sh": "#!/bin/sh\n"})
    (root / "run.sh").chmod(0o755)
    ws = Workspace(root)
    ws.capture()
    return root, ws


def test_restore_puts_back_exactly_what_a_candidates_tests_changed(tmp_path):
    root, ws = _captured(tmp_path)
    (root / "pkg" / "mod.py").write_text("x = 2\n")  # same size, rewritten in place
    (root / "pkg" / "conftest.py").write_text("forged = True\n")
    (root / "vendor" / ".git" / "HEAD").unlink()
    os.mkfifo(root / "pkg" / "pipe")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "pkg" / "__pycache__").symlink_to(outside)
    assert ws.restore() >= 5
    assert (root / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert sorted(p.name for p in (root / "pkg").iterdir()) == ["mod.py"]
    assert (root / "vendor" / ".git" / "HEAD").read_text() == "ref\n"  # an odd name stays a name
    assert list(outside.iterdir()) == []
    assert ws.restore() == 0  # and now it is exact


def test_restore_repairs_a_directory_a_test_locked_and_one_swapped_for_a_link(tmp_path):
    root, ws = _captured(tmp_path)
    (root / "vendor").chmod(0)
    os.rename(root / "pkg", tmp_path / "moved")
    (root / "pkg").symlink_to(tmp_path / "moved")
    ws.restore()
    assert not (root / "pkg").is_symlink() and (root / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert stat.S_IMODE((root / "vendor").stat().st_mode) == 0o755 or os.geteuid() != 0
    assert (root / "vendor" / ".git" / "HEAD").exists()


def test_an_accepted_edit_keeps_the_files_mode_and_everything_else_is_undone(tmp_path):
    from ralph.domain.candidate import FileChange

    root, ws = _captured(tmp_path)
    change = FileChange("run.sh", "#!/bin/sh\n", "#!/bin/sh\necho hi\n")
    ws.apply([change])
    (root / "junk.txt").write_text("left by a test\n")
    ws.accept([change])
    assert (root / "run.sh").read_text().endswith("echo hi\n")
    assert os.access(root / "run.sh", os.X_OK)
    assert not (root / "junk.txt").exists()
    (root / "run.sh").write_text("tampered\n")
    ws.restore()
    assert (root / "run.sh").read_text().endswith("echo hi\n")


def test_taking_accepted_changes_out_again_restores_the_tree_exactly(tmp_path):
    """A background gate that fails undoes its state: directories its new files made go, and a file
    its edit deleted comes back with its mode."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / "a.py").chmod(0o755)
    ws = Workspace(root)
    ws.capture()
    added = [FileChange("pkg/new/mod.py", None, "y = 2\n")]
    ws.apply(added)
    ws.accept(added)
    ws.revert_accepted(added)
    assert sorted(p.name for p in root.iterdir()) == ["a.py"]
    deleted = [FileChange("a.py", "x = 1\n", None)]
    ws.apply(deleted)
    ws.accept(deleted)
    assert not (root / "a.py").exists()
    ws.revert_accepted(deleted)
    assert (root / "a.py").read_text() == "x = 1\n"
    assert stat.S_IMODE((root / "a.py").stat().st_mode) == 0o755
    ws.restore()  # and it stays so
    assert sorted(p.name for p in root.iterdir()) == ["a.py"]
