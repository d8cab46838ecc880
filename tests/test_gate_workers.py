"""The gate on more cores: its whole-suite run across pytest-xdist workers (`gate_workers`), with the
same fail-closed checks as one process: every test the workers collected is accounted for, a worker
that goes down gives no verdict, and what a worker's tests changed in pytest's machinery is seen.
Real pytest-xdist, real git, real bubblewrap."""

from __future__ import annotations

import json
import re
import sys
import venv

import pytest

from ralph.config import RunConfig, check_config
from ralph.domain.errors import RalphError
from ralph.domain.results import Scope
from ralph.sandboxes.bwrap import BwrapSandbox
from ralph.sandboxes.local import LocalSandbox
from ralph.trace import read_trace
from ralph.validators.gate_workers import gate_workers, project_decides_xdist, xdist_option
from ralph.validators.pytest_run import PytestValidator, gate_tests
from ralph.validators.toolchain import Toolchain
from tests.conftest import BUGGY_WINDOWS, git, run_ralph, write_files
from tests.test_sound_verdicts import FIXED, needs_bwrap, replay, run_fix, verdicts

pytest.importorskip("xdist", reason="the gate's workers are pytest-xdist's")

# A suite of two files (one per worker with --dist=loadfile); each test says where it runs.
SUITE = {
    "lib.py": "def double(x):\n    return x * 2\n",
    "tests/test_one.py": (
        "import os\n\nfrom lib import double\n\n\n"
        "def test_in_a_worker():\n    assert os.environ.get('PYTEST_XDIST_WORKER', '').startswith('gw')\n\n\n"
        "def test_double():\n    assert double(2) == 4\n"
    ),
    "tests/test_two.py": "from lib import double\n\n\ndef test_double_again():\n    assert double(3) == 6\n",
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
}


@pytest.fixture
def gate(make_repo, tmp_path):
    """The gate with two workers on a copy of a repository, shown at the repository's path in
    bubblewrap, as the loop runs it; `gate(files)` makes it (the suite's files changed by `files`)."""
    made: list[tuple[PytestValidator, BwrapSandbox]] = []

    def make(files: dict[str, str] | None = None, **options) -> PytestValidator:
        user = make_repo(SUITE)
        ws, scratch = tmp_path / "copy" / "ws", tmp_path / "copy" / "scratch"
        scratch.mkdir(parents=True)
        git(tmp_path, "clone", "-q", str(user), str(ws))
        write_files(ws, files or {})
        box = BwrapSandbox(ws, writable=[scratch])
        toolchain = Toolchain(sys.executable, box, ws, scratch=scratch, root=ws, user_root=user)
        validator = gate_tests(
            toolchain, warm=True, test_timeout_s=options.get("test_timeout_s", 30), workers=2
        )
        made.append((validator, box))
        return validator

    yield make
    for validator, box in made:
        if validator.warm is not None:
            validator.warm.close()
        box.close()


def outcomes(result) -> dict[str, str]:
    return {t.nodeid.rsplit("::", 1)[-1]: t.outcome for t in result.tests}


@needs_bwrap
def test_a_good_state_passes_across_two_workers(gate):
    result = gate().check(Scope(timeout_s=60))
    assert result.ok and result.error is None, (result.detail, result.tests)
    assert outcomes(result) == {
        "test_in_a_worker": "passed",
        "test_double": "passed",
        "test_double_again": "passed",
    }
    assert "across 2 pytest-xdist workers" in result.detail


@pytest.mark.slow
@needs_bwrap
def test_a_regression_fails_the_gate_and_stops_it(gate):
    # (named to follow test_two.py: pytest gives them out after it)
    slow = {
        f"tests/test_zslow{i}.py": "import time\n\n\ndef test_slow():\n    time.sleep(2)\n" for i in range(6)
    }
    validator = gate({"lib.py": "def double(x):\n    return x + 2\n", **slow})
    passing = {"tests/test_one.py::test_double", "tests/test_two.py::test_double_again"}
    result = validator.check(Scope(timeout_s=60), guard=passing)
    assert not result.ok and result.error is None, (result.detail, result.tests)
    assert outcomes(result)["test_double_again"] == "failed"
    # Stopped through xdist's controller (the verdict is known): the files not yet given out never run.
    assert result.stopped_early and len(result.tests) < 9, result.tests


@needs_bwrap
def test_a_module_that_no_longer_imports_fails_the_gate_and_the_rest_still_runs(gate):
    broken = "from lib import triple\n\n\ndef test_triple():\n    assert triple(1) == 3\n"
    result = gate({"tests/test_two.py": broken}).check(Scope(timeout_s=60))
    assert not result.ok and result.error is None, (result.detail, result.tests)
    assert {t.nodeid: t.outcome for t in result.tests} == {
        "tests/test_one.py::test_in_a_worker": "passed",
        "tests/test_one.py::test_double": "passed",
        "tests/test_two.py": "error",
    }


@needs_bwrap
def test_a_test_that_kills_its_worker_gives_no_verdict(gate):
    dies = "import os\n\n\ndef test_dies():\n    os._exit(0)\n\n\ndef test_after():\n    pass\n"
    result = gate({"tests/test_two.py": dies}).check(Scope(timeout_s=60))
    assert not result.ok
    assert result.error is not None and "went down without its report" in result.error, result.error
    assert "tests/test_two.py::test_dies" in result.error


@needs_bwrap
def test_workers_that_all_die_while_collecting_give_no_verdict(gate):
    """Not "no tests collected": the record of the workers is read first."""
    dies = "import os\n\nif os.environ.get('PYTEST_XDIST_WORKER'):\n    os._exit(0)\n"
    result = gate({"lib.py": SUITE["lib.py"] + dies}).check(Scope(timeout_s=60))
    assert not result.ok and result.error is not None
    assert "worker" in result.error, result.error


@needs_bwrap
def test_the_workers_command_line_and_main_module_are_python_m_pytests(gate):
    """A test in a worker reads the command line and `__main__` a one-process `python -m pytest` has."""
    sniff = (
        "import sys\n\nimport __main__\n\n\ndef test_looks_like_python_m_pytest():\n"
        "    assert sys.argv[0].endswith('__main__.py'), sys.argv\n"
        "    assert (getattr(__main__, '__file__', None) or '').endswith('pytest/__main__.py')\n"
    )
    result = gate({"tests/test_three.py": sniff}).check(Scope(timeout_s=60))
    assert result.ok, (result.detail, result.error, [t.message for t in result.tests if t.failing])


@pytest.mark.slow
@needs_bwrap
def test_a_test_that_never_reports_fails_the_gate_by_name(gate):
    # A hook that drops one test's run: the worker moves on, the run exits 0.
    conftest = "def pytest_runtest_protocol(item, nextitem):\n    return True if item.name == 'test_double' else None\n"
    result = gate({"tests/conftest.py": conftest}).check(Scope(timeout_s=60))
    assert not result.ok
    assert result.error is not None and "reported nothing (tests/test_one.py::test_double)" in result.error


@pytest.mark.slow
@needs_bwrap
def test_a_test_that_hangs_in_a_worker_fails_at_the_per_test_limit(gate):
    hangs = "import time\n\n\ndef test_hangs():\n    time.sleep(120)\n"
    result = gate({"tests/test_two.py": hangs}, test_timeout_s=2).check(Scope(timeout_s=60))
    assert result.error is None and not result.ok, result.detail
    [hung] = [t for t in result.tests if t.nodeid.endswith("test_hangs")]
    assert hung.outcome == "failed" and "per-test limit" in hung.message


@pytest.mark.slow
@needs_bwrap
def test_pytests_machinery_changed_in_a_worker_gives_no_verdict(gate):
    lib = (
        "import _pytest.runner\n\nREAL = _pytest.runner.call_and_report\n\n\n"
        "def wrapped(*args, **kwargs):\n    return REAL(*args, **kwargs)\n\n\n"
        "def double(x):\n    _pytest.runner.call_and_report = wrapped\n    return x * 2\n"
    )
    result = gate({"lib.py": lib}).check(Scope(timeout_s=60))
    assert result.error is not None and "call_and_report was replaced, by lib.py" in result.error, (
        result.error
    )


@pytest.mark.slow
@needs_bwrap
def test_an_internal_error_in_a_worker_gives_no_verdict(gate):
    # xdist's controller says it, drops the worker and exits 0 once the others are done (or, when the
    # worker's end arrives first, has an internal error of its own: exit 3).
    lib = "import _pytest.runner\n\n\ndef double(x):\n    _pytest.runner.call_and_report = print\n    return x * 2\n"
    result = gate({"lib.py": lib}).check(Scope(timeout_s=60))
    assert result.error is not None and re.search("internal ?error", result.error, re.I), result.error
    assert "invalid keyword argument for print()" in result.error or "exit 3" in result.error


def test_the_targeted_runs_never_go_across_workers(tmp_path):
    write_files(tmp_path, SUITE)
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    validator = PytestValidator(toolchain, workers=2)
    named = validator.check(Scope(tests=("tests/test_one.py::test_in_a_worker",), timeout_s=60))
    assert outcomes(named) == {"test_in_a_worker": "failed"}  # (one process)
    first = validator.check(Scope(timeout_s=60), exitfirst=True)
    assert outcomes(first) == {"test_in_a_worker": "failed"}


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("background", [False, True])
def test_a_fix_is_committed_through_a_gate_across_workers(make_repo, tmp_path, background):
    repo = make_repo(BUGGY_WINDOWS)
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = run_fix(repo, drafter, max_iterations=1, background_gate=background, gate_workers=2)
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "accepted" and outcome.branch is not None, verdict
    gates = [r for r in read_trace(outcome.trace) if r["type"] == "gate"] if background else [verdict]
    [gate_stage] = [s for s in gates[0]["stages"] if s["stage"] == "gate"]
    assert "across 2 pytest-xdist workers" in gate_stage["detail"]


# When the gate takes workers


@pytest.mark.parametrize(
    ("addopts", "decides"),
    [
        (["-q", "--strict-markers"], None),
        (["-n", "auto"], "-n"),
        (["-n4"], "-n4"),
        (["--numprocesses=2"], "--numprocesses=2"),
        (["-p", "no:xdist"], "-p no:xdist"),
        (["-pno:xdist"], "-pno:xdist"),
        (["--dist", "loadscope"], "--dist"),
        (["--no-header", "-p", "no:randomly"], None),
    ],
)
def test_the_projects_own_xdist_options_are_found(addopts, decides):
    assert xdist_option(addopts) == decides


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-p no:xdist"\n'),
        ("pyproject.toml", '[tool.pytest]\naddopts = ["-n", "auto"]\n'),
        ("pytest.ini", "[pytest]\naddopts = -n 4\n"),
        ("setup.cfg", "[tool:pytest]\naddopts = --dist=loadgroup\n"),
        ("tox.ini", "[tox]\nenvlist = py311\n\n[pytest]\naddopts = -p no:xdist -q\n"),
    ],
)
def test_a_project_whose_settings_decide_about_xdist_keeps_its_gate_in_one_process(tmp_path, name, text):
    write_files(tmp_path, {name: text, "tests/test_it.py": "def test_it():\n    pass\n"})
    assert project_decides_xdist(tmp_path) is not None
    toolchain = Toolchain(sys.executable, LocalSandbox(), tmp_path)
    assert gate_workers(toolchain, 4, asked=False) == 0
    with pytest.raises(RalphError, match=f"gate_workers = 4, but the project's pytest settings.*{name}"):
        gate_workers(toolchain, 4, asked=True)


def test_an_interpreter_without_xdist_keeps_the_gate_in_one_process(tmp_path):
    write_files(tmp_path / "p", {"pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-q"\n'})
    venv.create(tmp_path / "env", with_pip=False)
    bare = Toolchain(str(tmp_path / "env" / "bin" / "python"), LocalSandbox(), tmp_path / "p")
    assert gate_workers(bare, 2, asked=False) == 0
    with pytest.raises(RalphError, match=r"pytest-xdist 3\.6 or later is not importable"):
        gate_workers(bare, 2, asked=True)
    assert gate_workers(Toolchain(sys.executable, LocalSandbox(), tmp_path / "p"), 2, asked=True) == 2


@pytest.mark.parametrize(
    ("cores", "background", "wanted"),
    [(2, True, 0), (3, True, 0), (4, True, 2), (16, True, 8), (8, False, 2), (2, False, 0)],
)
def test_auto_takes_half_the_cores_beside_the_loop_and_a_lanes_share_in_line(
    monkeypatch, cores, background, wanted
):
    monkeypatch.setattr("ralph.config.usable_cores", lambda: cores)
    assert RunConfig(background_gate=background, gate_workers="auto").gate_worker_count == wanted


def test_in_line_with_one_lane_the_gate_takes_every_core(monkeypatch):
    monkeypatch.setattr("ralph.config.usable_cores", lambda: 8)
    assert RunConfig(background_gate=False, jobs=1, gate_workers="auto").gate_worker_count == 8
    assert RunConfig(background_gate=False, jobs=2, gate_workers="auto").gate_worker_count == 4


def test_the_gate_runs_in_one_process_unless_asked_for_workers(monkeypatch):
    """As the user runs `pytest`: a test can tell an xdist worker (its environment names it), so
    workers are a choice, however many cores there are."""
    monkeypatch.setattr("ralph.config.usable_cores", lambda: 16)
    assert RunConfig().gate_worker_count == 0


def test_gate_workers_is_a_count_or_auto():
    assert check_config({"gate_workers": 2}).gate_worker_count == 2
    assert check_config({"gate_workers": 0}).gate_worker_count == 0
    for bad in (-1, "many"):
        with pytest.raises(RalphError, match="gate_workers"):
            check_config({"gate_workers": bad})


# `ralph bench gate`


@pytest.mark.slow
@needs_bwrap
def test_bench_gate_times_each_worker_count_against_one_process(tmp_path):
    write_files(tmp_path / "p", SUITE)
    proc = run_ralph(
        "bench", "gate", str(tmp_path / "p"), "--workers", "0,2", "--repeat", "2", "--python", sys.executable,
        "--json", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["tests"] == 3 and summary["sandbox"] == "bwrap"
    assert list(summary["workers"]) == ["0", "2"] and summary["workers"]["0"]["speedup"] == 1.0
    assert all(row["runs"] == 2 and row["median_ms"] > 0 for row in summary["workers"].values())


def test_bench_gate_refuses_workers_the_project_cannot_have(tmp_path):
    write_files(tmp_path / "p", {**SUITE, "pytest.ini": "[pytest]\naddopts = -p no:xdist\n"})
    proc = run_ralph("bench", "gate", str(tmp_path / "p"), "--workers", "0,2", "--python", sys.executable)
    assert proc.returncode != 0 and "gate_workers = 2, but the project's pytest settings" in proc.stderr
