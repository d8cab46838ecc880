"""The gate runs like the user's own run: the workspace shown at the user's repository path, the
user's TMPDIR, no setting of ours in the environment. A candidate right only where ralph runs it
(a path naming ralph, no TMPDIR, our settings in sight) passes its targeted tests and is rejected by
the gate, never committed; a true fix in a repository whose interpreter is its own .venv still is.

Real git repositories, real pytest, real bubblewrap; hostile candidates by replay."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ralph.domain.results import Scope
from ralph.sandboxes.bwrap import BwrapSandbox
from ralph.sandboxes.workspace import Workspace
from ralph.validators.pytest_run import PytestValidator, gate_tests
from ralph.validators.toolchain import Toolchain
from ralph.validators.warm import candidates_runner
from tests.conftest import BUGGY_WINDOWS, git, run_ralph, write_files
from tests.test_hostile_sandbox import _with_probe
from tests.test_sound_verdicts import FIXED, needs_bwrap, replay, run_fix, verdicts

pytestmark = needs_bwrap

# The gate beside the loop in both modes of --on-gate-failure, and in line.
GATES = pytest.mark.parametrize(
    "gate",
    [
        {"background_gate": True},
        {"background_gate": True, "on_gate_failure": "todo"},
        {"background_gate": False},
    ],
    ids=["background_gate", "background_gate_todo", "gate_in_line"],
)

# Each probe sets BREACHED = 1 where the run looks like the user's: the fix is wrong there.
AT_THE_COPYS_PATH = """import os
BREACHED = int(("ra" + "lph") not in os.getcwd())
"""
WITHOUT_A_TMPDIR = """import os
import tempfile
BREACHED = int(os.environ.get("TMPDIR") == tempfile.gettempdir())
"""
WITH_OUR_SETTINGS = """import os
BREACHED = int(not any(name.startswith("RAL" + "PH") for name in os.environ))
"""


def _repo(make_repo, files: dict[str, str] = BUGGY_WINDOWS) -> Path:
    repo = make_repo(files)
    assert "ralph" not in str(repo).lower()  # (the user's path must not say it either)
    return repo


def _rejected_by_the_gate(outcome) -> None:
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "rejected" and verdict["failed_stage"] == "gate", verdict
    assert outcome.branch is None and outcome.result.outcome != "goal"


@pytest.mark.slow
@GATES
def test_a_fix_right_only_at_the_copys_path_is_rejected_by_the_gate(make_repo, tmp_path, gate):
    repo = _repo(make_repo)
    drafter = replay(
        tmp_path,
        {"description": "fix, at our path", "files": {"windows.py": _with_probe(FIXED, AT_THE_COPYS_PATH)}},
    )
    _rejected_by_the_gate(run_fix(repo, drafter, max_iterations=1, **gate))


@pytest.mark.slow
@GATES
def test_a_fix_right_only_without_the_users_tmpdir_is_rejected_by_the_gate(
    make_repo, tmp_path, monkeypatch, gate
):
    repo = _repo(make_repo)
    users = tmp_path / "users-tmp"
    users.mkdir()
    monkeypatch.setenv("TMPDIR", str(users))
    monkeypatch.setattr(tempfile, "tempdir", None)  # ralph's own folder goes there too, as it would
    drafter = replay(
        tmp_path,
        {"description": "fix, no TMPDIR", "files": {"windows.py": _with_probe(FIXED, WITHOUT_A_TMPDIR)}},
    )
    _rejected_by_the_gate(run_fix(repo, drafter, max_iterations=1, **gate))
    assert not any(users.iterdir())  # the tests' files went to the sandbox's private tmpfs


@pytest.mark.slow
@GATES
def test_a_fix_right_only_with_our_settings_in_sight_is_never_committed(make_repo, tmp_path, gate):
    repo = _repo(make_repo)
    drafter = replay(
        tmp_path,
        {"description": "fix, seeing us", "files": {"windows.py": _with_probe(FIXED, WITH_OUR_SETTINGS)}},
    )
    outcome = run_fix(repo, drafter, max_iterations=1, **gate)
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "rejected" and outcome.branch is None, verdict


def _own_venv(repo: Path) -> Path:
    """A virtual environment inside `repo` (ignored by git) that can run pytest."""
    venv = repo / ".venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True
    )
    python = venv / "bin" / "python"
    if subprocess.run([python, "-c", "import pytest"], capture_output=True, check=False).returncode:
        [site] = (venv / "lib").glob("python*/site-packages")
        (site / "ours.pth").write_text(str(Path(pytest.__file__).parent.parent) + "\n")
    return python


@pytest.mark.slow
@GATES
def test_a_true_fix_in_a_repo_with_its_own_venv_is_committed_without_it(make_repo, tmp_path, gate):
    repo = _repo(make_repo, {**BUGGY_WINDOWS, ".gitignore": ".venv/\n"})
    python = _own_venv(repo)
    before = sorted(p.relative_to(repo) for p in (repo / ".venv").rglob("*"))
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = run_fix(repo, drafter, max_iterations=1, **gate)
    assert outcome.python == str(python)
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "accepted", verdict
    assert outcome.result.outcome == "goal" and outcome.branch is not None
    files = git(repo, "ls-tree", "-r", "--name-only", outcome.branch).split()
    assert "windows.py" in files and not any(f.startswith(".venv") for f in files)
    assert sorted(p.relative_to(repo) for p in (repo / ".venv").rglob("*")) == before


def test_from_the_command_line_the_gate_in_line_rejects_it_too(make_repo, tmp_path):
    repo = _repo(make_repo)
    drafter = replay(
        tmp_path,
        {"description": "fix, at our path", "files": {"windows.py": _with_probe(FIXED, AT_THE_COPYS_PATH)}},
    )
    proc = run_ralph(
        "fix",
        str(repo),
        "--drafter",
        drafter,
        "--candidates",
        "1",
        "--max-iterations",
        "1",
        "--no-background-gate",
    )
    assert proc.returncode != 0, proc.stdout
    assert not git(repo, "branch", "--list", "ralph/*").strip()


def test_a_node_id_naming_the_project_path_means_the_same_test_in_the_gate(make_repo, tmp_path):
    here = (
        "import os\n\nimport pytest\n\nHERE = os.path.dirname(os.path.abspath(__file__))\n\n\n"
        '@pytest.mark.parametrize("folder", [HERE])\ndef test_here(folder):\n    assert os.path.isdir(folder)\n'
    )
    repo = _repo(make_repo, {**BUGGY_WINDOWS, "tests/test_here.py": here})
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = run_fix(repo, drafter, max_iterations=1, background_gate=False)
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "accepted" and outcome.branch is not None, verdict


SEES = """import os, tempfile

def test_sees():
    names = sorted(name for name in os.environ if "RALPH" in name.upper())
    assert not names, names
    print("SEEN", os.getcwd(), os.environ.get("TMPDIR"), tempfile.gettempdir())
    assert os.getcwd() == {cwd!r}
    assert os.environ.get("TMPDIR") == {tmpdir!r}
"""


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["gate_warm", "gate_fresh", "gate_workers", "targeted"])
def test_what_a_test_sees_of_the_run(tmp_path, monkeypatch, runner):
    user, ws, scratch = tmp_path / "repo", tmp_path / "copy" / "ws", tmp_path / "copy" / "scratch"
    users_tmp = tmp_path / "users-tmp"
    for folder in (user, scratch, users_tmp):
        folder.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(users_tmp))
    gate = runner.startswith("gate")
    expected = {"cwd": str(user if gate else ws), "tmpdir": str(users_tmp) if gate else None}
    write_files(ws, {"tests/test_sees.py": SEES.format(**expected)})
    box = BwrapSandbox(ws, writable=[scratch])
    toolchain = Toolchain(sys.executable, box, ws, scratch=scratch, root=ws, user_root=user)
    if runner == "gate_workers":  # (its tests in pytest-xdist's workers, subprocesses of the child)
        pytest.importorskip("xdist")
        tests = gate_tests(toolchain, True, 30, workers=2)
    elif gate:
        tests = gate_tests(toolchain, runner == "gate_warm", 30)
    else:
        tests = PytestValidator(toolchain, warm=candidates_runner(toolchain, ()))
    try:
        result = tests.check(Scope(timeout_s=60))
    finally:
        if tests.warm is not None:
            tests.warm.close()
        box.close()
    assert result.ok, result.tests
    assert [t.nodeid for t in result.tests] == ["tests/test_sees.py::test_sees"]
    assert ("pytest-xdist workers" in result.detail) == (runner == "gate_workers")
    assert not (user / "tests").exists()  # the user's folder stays as it was


def test_the_users_venv_is_bound_back_on_a_mount_point_the_state_keeps(tmp_path):
    user, ws = tmp_path / "repo", tmp_path / "copy" / "ws"
    write_files(ws, {"m.py": "X = 1\n"})
    user.mkdir()
    python = _own_venv(user)
    workspace = Workspace(ws)
    box = BwrapSandbox(ws).mounted_at(user)
    toolchain = Toolchain(str(python), box, ws, root=ws, user_root=user)
    assert toolchain.make_mount_points() == [ws / ".venv"]
    workspace.capture()
    try:
        code = "import sys, m; print(sys.prefix, m.__file__)"
        result = box.run([str(python), "-B", "-c", code], cwd=str(ws), env=toolchain.python_env())
    finally:
        box.close()
    assert result.ok, result.output
    assert result.output.split() == [str(user / ".venv"), str(user / "m.py")]
    assert workspace.restore() == 0  # nothing to undo: the mount point is part of the state
    assert not any((ws / ".venv").iterdir())
    assert box.inside(f"--rootdir={ws}:{ws}/src") == f"--rootdir={user}:{user}/src"
    assert box.outside(f"t.py::test[{user}/a]") == f"t.py::test[{ws}/a]"
    assert box.inside(f"{ws}2/x") == f"{ws}2/x"  # another folder whose name begins the same
