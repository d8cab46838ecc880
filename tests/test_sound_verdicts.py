"""Sound verdicts: a stage that cannot give a verdict fails the candidate, a candidate's code never runs
on the host, and nothing a rejected candidate's tests left behind decides the next verdict.

Hostile candidates come through `replay:FILE`; projects are real git repositories with real pytest,
ruff and mypy; the end-to-end cases run in real bubblewrap (they skip where it cannot run)."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from ralph.config import RunConfig
from ralph.domain.results import Scope, TestResult
from ralph.sandboxes.bwrap import available
from ralph.sandboxes.local import LocalSandbox, read_regular
from ralph.session import fix
from ralph.trace import read_trace
from ralph.validators.localize import suspicious_lines
from ralph.validators.toolchain import Toolchain
from ralph.view import QuietView
from tests.conftest import BUGGY_WINDOWS, git, run_ralph, write_files

needs_bwrap = pytest.mark.skipif(available() is not None, reason=f"bubblewrap cannot run here: {available()}")
FIXED = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k + 1)")
WRONG = BUGGY_WINDOWS["windows.py"].replace("len(xs) - k)", "len(xs) - k - 1)")


def replay(tmp_path: Path, *records: dict) -> str:
    file = tmp_path / "edits.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in records))
    return f"replay:{file}"


def verdicts(outcome) -> list[dict]:
    """Every verified candidate's verdict. One accepted on its targeted stages, whose gate then ran
    beside the loop, has that gate's verdict, reason and failed stage."""
    records = read_trace(outcome.trace)
    gates = {g["iteration"]: g for g in records if g["type"] == "gate"}
    found = []
    for r in records:
        for c in r["candidates"] if r["type"] == "iteration" else []:
            if c.get("gate") == "background":
                gate = gates.get(r["i"], {"verdict": "never gated", "reason": "never gated"})
                verdict = "accepted" if gate["verdict"] == "passed" else "rejected"
                c = {
                    **c,
                    "verdict": verdict,
                    "reason": gate["reason"],
                    "failed_stage": gate.get("failed_stage"),
                }
            found.append(c)
    return found


def run_fix(repo: Path, drafter: str, **config) -> object:
    return fix(repo, RunConfig(drafter=drafter, candidates=1, **config), view=QuietView(notices=False))


# Fail closed


def test_a_candidate_that_edits_the_ruff_config_is_refused(make_repo, tmp_path):
    repo = make_repo(
        {**BUGGY_WINDOWS, "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'}
    )
    pyproject = '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n[tool.ruff.lint]\nselect = ["E999"]\n'
    drafter = replay(
        tmp_path,
        {
            "description": "break ruff",
            "files": {"windows.py": "import os\n" + FIXED, "pyproject.toml": pyproject},
        },
    )
    outcome = run_fix(repo, drafter, max_iterations=1)
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "rejected" and verdict["failed_stage"] == "policy"
    assert "pyproject.toml [tool]" in verdict["reason"]
    assert outcome.branch is None


def test_a_candidate_that_adds_a_mypy_plugin_is_refused(make_repo, tmp_path):
    files = {**BUGGY_WINDOWS, "pyproject.toml": BUGGY_WINDOWS["pyproject.toml"] + "[tool.mypy]\n"}
    repo = make_repo(files)
    pyproject = files["pyproject.toml"] + 'plugins = ["missing"]\n'
    drafter = replay(
        tmp_path, {"description": "plugin", "files": {"windows.py": FIXED, "pyproject.toml": pyproject}}
    )
    [verdict] = verdicts(run_fix(repo, drafter, max_iterations=1))
    assert verdict["failed_stage"] == "policy" and "pyproject.toml" in verdict["reason"]


def test_a_candidate_that_reaches_into_the_test_harness_is_refused(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    forged = FIXED + "\nimport sys\nsys.modules['ralph_pytest_report']._write = print\n"
    drafter = replay(tmp_path, {"description": "forge", "files": {"windows.py": forged}})
    [verdict] = verdicts(run_fix(repo, drafter, max_iterations=1))
    assert verdict["failed_stage"] == "policy"
    assert "windows.py:9: sys.modules" in verdict["reason"] and "test harness" in verdict["reason"]


def _fake_ruff(tmp_path: Path, works: Path) -> str:
    """An interpreter directory whose `ruff` is ours until `works` disappears, then exits 2."""
    env = tmp_path / "env" / "bin"
    env.mkdir(parents=True)
    os.symlink(sys.executable, env / "python")
    from ralph.validators.toolchain import ruff_bin

    script = env / "ruff"
    script.write_text(
        f'#!/bin/sh\n[ -e {works} ] && exec {ruff_bin()} "$@"\necho "ruff crashed" >&2\nexit 2\n'
    )
    script.chmod(0o755)
    return str(env / "python")


def test_a_ruff_that_stops_giving_a_verdict_fails_the_candidate(tmp_path):
    from ralph.domain.candidate import Candidate, FileChange
    from ralph.sandboxes.workspace import Workspace
    from ralph.validators.facts import VerifySettings
    from ralph.validators.pipeline import Verifier

    works = tmp_path / "ruff-works"
    works.touch()
    write_files(tmp_path / "ws", BUGGY_WINDOWS)
    ws = Workspace(tmp_path / "ws")
    toolchain = Toolchain(_fake_ruff(tmp_path, works), LocalSandbox(), ws.project)
    verifier = Verifier(toolchain, VerifySettings())
    try:
        state, _ = verifier.baseline()
        assert verifier.tools.ruff.binary.startswith(str(tmp_path)) and not verifier.facts.disabled
        works.unlink()
        change = FileChange("windows.py", BUGGY_WINDOWS["windows.py"], "import os\n" + FIXED)
        ws.apply([change])
        report = verifier.verify(Candidate("test", "fix + unused import", (change,)), state)
    finally:
        verifier.close()
    assert not report.accepted
    assert report.failed_stage == "ruff" and "no verdict" in report.reason and "ruff crashed" in report.reason


@pytest.mark.slow
def test_a_ruff_config_broken_at_the_baseline_turns_ruff_off_with_a_notice(make_repo, tmp_path):
    files = {**BUGGY_WINDOWS, "ruff.toml": 'lint.select = ["NOT-A-RULE"]\n'}
    repo = make_repo(files)
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = run_fix(repo, drafter, max_iterations=2)
    start = next(r for r in read_trace(outcome.trace) if r["type"] == "run_start")
    assert "ruff" in start["disabled_stages"]
    assert any(line.startswith("ruff is off for this run") for line in outcome.notices)
    assert outcome.result.outcome == "goal"
    # From the command line: said on one line before the loop starts.
    git(repo, "branch", "-D", outcome.branch)
    proc = run_ralph("fix", str(repo), "--drafter", drafter, "--candidates", "1")
    assert proc.returncode == 0, proc.stderr
    assert "ruff is off for this run" in proc.stdout + proc.stderr


def test_a_type_checker_that_times_out_gives_no_verdict(tmp_path):
    from ralph.validators.mypy import MypyValidator

    write_files(tmp_path, {"pyproject.toml": "[tool.mypy]\n", "m.py": "x: int = 1\n"})
    mypy = MypyValidator(Toolchain(sys.executable, LocalSandbox(), tmp_path))
    try:
        result = mypy.check(Scope(timeout_s=0.001))
    finally:
        mypy.close()
    assert not result.ok and result.error is not None and "timed out" in result.error


def test_a_missing_mypy_plugin_at_the_baseline_turns_mypy_off_with_a_notice(make_repo, tmp_path):
    files = {
        **BUGGY_WINDOWS,
        "pyproject.toml": BUGGY_WINDOWS["pyproject.toml"] + '[tool.mypy]\nplugins = ["missing"]\n',
    }
    repo = make_repo(files)
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = run_fix(repo, drafter, max_iterations=2)
    start = next(r for r in read_trace(outcome.trace) if r["type"] == "run_start")
    assert "missing" in start["disabled_stages"]["mypy"]
    assert outcome.result.outcome == "goal"


def _pytest_stage(project: Path, timeout_s: float = 60):
    from ralph.validators.pytest_run import PytestValidator

    return PytestValidator(Toolchain(sys.executable, LocalSandbox(), project)).check(
        Scope(timeout_s=timeout_s)
    )


def test_a_test_process_killed_after_its_tests_passed_gives_no_verdict(tmp_path):
    write_files(
        tmp_path,
        {
            "tests/test_a.py": "def test_one():\n    assert True\n",
            "tests/conftest.py": (
                "import os, signal, pytest\n\n\n@pytest.fixture(scope='session', autouse=True)\n"
                "def die():\n    yield\n    os.kill(os.getpid(), signal.SIGKILL)\n"
            ),
        },
    )
    result = _pytest_stage(tmp_path)
    assert [t.outcome for t in result.tests] == ["passed"]  # the record was written...
    assert result.error is not None and "signal 9" in result.error  # ...and vouches for nothing


def test_a_report_writer_replaced_to_write_passes_disagrees_with_pytests_count(tmp_path):
    """A conftest is the project's own (the harness check leaves what it changes to the counts)."""
    write_files(
        tmp_path,
        {
            "tests/test_a.py": "def test_one():\n    assert False\n",
            "tests/conftest.py": (
                "import ralph_pytest_report as r\n_write = r._write\n"
                "r._write = lambda rec: _write({**rec, 'outcome': 'passed'} if 'outcome' in rec else rec)\n"
            ),
        },
    )
    result = _pytest_stage(tmp_path)
    assert result.error is not None and "disagree with pytest" in result.error


def test_a_report_rewritten_to_passing_disagrees_with_pytests_exit_status(tmp_path):
    """The report's file, not the functions the plugin checks: pytest's own count still disagrees."""
    write_files(
        tmp_path,
        {
            "tests/test_a.py": "def test_one():\n    assert False\n",
            "tests/conftest.py": (
                "import ralph_pytest_report as r\n\n\nclass Passing:\n"
                "    def __init__(self, f):\n        self.f = f\n\n"
                "    def write(self, line):\n"
                "        return self.f.write(line.replace('\"failed\"', '\"passed\"'))\n\n"
                "    def __getattr__(self, name):\n        return getattr(self.f, name)\n\n\n"
                "r._report_file = Passing(r._report_file)\n"
            ),
        },
    )
    result = _pytest_stage(tmp_path)
    assert result.error is not None and "disagree" in result.error


def test_a_run_that_ends_through_os_exit_gives_no_verdict(tmp_path):
    write_files(
        tmp_path,
        {
            "tests/test_a.py": "import os\n\n\ndef test_one():\n    pass\n\n\ndef test_two():\n    os._exit(0)\n"
        },
    )
    result = _pytest_stage(tmp_path)
    assert result.error is not None and "final report" in result.error


def test_a_fifo_in_place_of_the_report_never_hangs_ralph(tmp_path):
    write_files(
        tmp_path,
        {
            "tests/test_a.py": "def test_one():\n    pass\n",
            "tests/conftest.py": (
                "import os\n\nFOUND = []\n\n\ndef pytest_sessionstart(session):\n"
                "    for fd in os.listdir('/proc/self/fd'):\n"
                "        try:\n            target = os.readlink(f'/proc/self/fd/{fd}')\n"
                "        except OSError:\n            continue\n"
                "        if target.endswith('report.jsonl'):\n            FOUND.append(target)\n\n\n"
                "def pytest_unconfigure(config):\n"
                "    for target in FOUND:\n        os.unlink(target)\n        os.mkfifo(target)\n"
            ),
        },
    )
    start = time.monotonic()
    result = _pytest_stage(tmp_path, timeout_s=30)
    assert time.monotonic() - start < 20
    assert result.error is not None and "replaced" in result.error


def test_a_fifo_is_not_read_as_a_file(tmp_path):
    fifo = tmp_path / "report.jsonl"
    os.mkfifo(fifo)
    assert read_regular(fifo) is None
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_typo_in_a_tests_target_is_bad_input(make_repo):
    repo = make_repo(BUGGY_WINDOWS)
    proc = run_ralph("fix", str(repo), "--tests", "tests/test_windos.py", "--no-sandbox")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "tests/test_windos.py" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_file_named_like_a_ruff_option_is_linted_as_a_file(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    sneaky = "--config=lint.ignore=['ALL']#.py"
    drafter = replay(
        tmp_path, {"description": "sneaky", "files": {"windows.py": FIXED, sneaky: "print(undefined_name)\n"}}
    )
    [verdict] = verdicts(run_fix(repo, drafter, max_iterations=1))
    assert verdict["verdict"] == "rejected" and verdict["failed_stage"] == "ruff"
    assert "F821" in verdict["reason"]


def test_a_forged_traceback_frame_never_points_outside_the_project():
    failing = [
        TestResult(
            "tests/test_a.py::test_x",
            "failed",
            frames=(
                ("pkg/../../../../root/secret.py", 1, "f"),
                ("/etc/passwd", 1, "g"),
                ("pkg/a.py", 3, "h"),
            ),
        )
    ]
    assert suspicious_lines(failing, {}, [], ()) == [("pkg/a.py", 3)]


# Without a ruff configuration: ralph's documented rule set, whatever the installed ruff's defaults


OFF_BY_ONE = {
    "agg.py": "def total(xs):\n    s = 0\n    for i in range(1, len(xs)):\n        s += xs[i]\n    return s\n",
    "tests/test_agg.py": (
        "from agg import total\n\n\ndef test_total():\n    assert total([1, 2, 3]) == 6\n    assert total([4, 5]) == 9\n"
    ),
}


@pytest.mark.slow
def test_an_off_by_one_range_is_fixed_without_a_ruff_config(make_repo, tmp_path):
    repo = make_repo(OFF_BY_ONE)
    outcome = fix(repo, RunConfig(), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"
    assert "range(len(xs))" in git(repo, "show", f"{outcome.branch}:agg.py")
    # `range(0, n)` is fine by ralph's documented rules (a newer ruff's defaults flag it: PIE808).
    again = make_repo(OFF_BY_ONE, name="again")
    edit = {"files": {"agg.py": OFF_BY_ONE["agg.py"].replace("range(1, ", "range(0, ")}}
    (tmp_path / "edits.jsonl").write_text(json.dumps(edit) + "\n")
    outcome = fix(
        again, RunConfig(drafter=f"replay:{tmp_path / 'edits.jsonl'}"), view=QuietView(notices=False)
    )
    assert outcome.result.outcome == "goal"
    assert "range(0, len(xs))" in git(again, "show", f"{outcome.branch}:agg.py")


def test_safe_lint_fixes_are_applied_and_committed(make_repo, tmp_path):
    repo = make_repo({**OFF_BY_ONE, "pyproject.toml": '[tool.ruff.lint]\nselect = ["F", "PIE"]\n'})
    edit = {"files": {"agg.py": OFF_BY_ONE["agg.py"].replace("range(1, ", "range(0, ")}}
    (tmp_path / "edits.jsonl").write_text(json.dumps(edit) + "\n")
    outcome = fix(
        repo, RunConfig(drafter=f"replay:{tmp_path / 'edits.jsonl'}"), view=QuietView(notices=False)
    )
    assert outcome.result.outcome == "goal"
    committed = git(repo, "show", f"{outcome.branch}:agg.py")
    assert "for i in range(len(xs)):" in committed  # PIE808's safe fix, part of the edit
    assert "ruff's safe fixes" in git(repo, "log", "-1", "--format=%B", outcome.branch)


@pytest.mark.slow
def test_a_ruff_toml_in_a_parent_directory_never_applies(make_repo, tmp_path):
    (tmp_path / "ruff.toml").write_text('lint.select = ["ALL"]\n')  # above the repository
    repo = make_repo(OFF_BY_ONE)
    outcome = fix(repo, RunConfig(), view=QuietView(notices=False))
    assert outcome.result.outcome == "goal"


# What a rejected candidate's tests leave behind


@needs_bwrap
def test_a_conftest_written_by_a_rejected_candidates_tests_never_decides_the_next(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    # Runs when the tests import the module (a wrong fix: rejected), and plants a conftest that
    # turns every failure into a pass.
    forger = (
        "import pathlib\n\n"
        + WRONG
        + "\npathlib.Path(__file__).with_name('tests').joinpath('conftest.py').write_text(\n"
        "    'import pytest\\n\\n@pytest.hookimpl(hookwrapper=True)\\n'\n"
        "    'def pytest' '_runtest_makereport(item, call):\\n'  # split: a lexical scan cannot see it\n"
        "    '    outcome = yield\\n    outcome.get_result().outcome = \"passed\"\\n')\n"
    )
    noop = BUGGY_WINDOWS["windows.py"] + "# a no-op\n"
    drafter = replay(
        tmp_path,
        {"description": "wrong fix that plants a conftest", "files": {"windows.py": forger}},
        {"description": "a no-op", "files": {"windows.py": noop}},
    )
    outcome = run_fix(repo, drafter, max_iterations=2)
    first, second = verdicts(outcome)
    assert first["verdict"] == "rejected" and second["verdict"] == "rejected"
    assert outcome.result.outcome != "goal" and outcome.branch is None


@needs_bwrap
def test_a_daemon_a_candidates_tests_start_is_gone_before_the_next_candidate(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    spawner = (
        "import subprocess\n\n"
        + WRONG
        + "\nsubprocess.Popen(['setsid', 'sh', '-c', 'sleep 4242.5 & sleep 4242.5'], start_new_session=True)\n"
    )
    # The second candidate is right only where no such daemon can be seen in the sandbox.
    checker = FIXED.replace(
        "def double(x):\n    return x * 2\n",
        "def double(x):\n    import os\n    for pid in os.listdir('/proc'):\n"
        "        try:\n            cmd = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
        "        except OSError:\n            continue\n"
        "        if b'4242.5' in cmd:\n            return None\n    return x * 2\n",
    )
    drafter = replay(
        tmp_path,
        {"description": "a wrong fix that leaves a daemon", "files": {"windows.py": spawner}},
        {"description": "a fix that sees no daemon", "files": {"windows.py": checker}},
    )
    outcome = run_fix(repo, drafter, max_iterations=2)
    first, second = verdicts(outcome)
    assert first["verdict"] == "rejected"
    assert second["verdict"] == "accepted", second["reason"]


@needs_bwrap
def test_a_pycache_swapped_for_a_link_into_the_users_tree_is_never_written_through(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    user_cache = repo / "__pycache__"
    user_cache.mkdir(exist_ok=True)
    before = sorted(p.name for p in user_cache.iterdir())
    swapper = (
        "import os\nimport shutil\n\n" + WRONG + "\nhere = os.path.dirname(os.path.abspath(__file__))\n"
        "shutil.rmtree(os.path.join(here, '__pycache__'), ignore_errors=True)\n"
        f"os.symlink({str(user_cache)!r}, os.path.join(here, '__pycache__'))\n"
    )
    drafter = replay(
        tmp_path,
        {"description": "swap the bytecode cache for a link", "files": {"windows.py": swapper}},
        {"description": "the fix", "files": {"windows.py": FIXED}},
    )
    outcome = run_fix(repo, drafter, max_iterations=2)
    assert sorted(p.name for p in user_cache.iterdir()) == before
    assert outcome.result.outcome == "goal"


@needs_bwrap
def test_a_candidates_disk_writes_past_the_cap_are_killed(make_repo, tmp_path, monkeypatch):
    monkeypatch.setenv("RALPH_DISK_CAP", str(4 << 20))
    repo = make_repo(BUGGY_WINDOWS)
    filler = FIXED.replace(
        "def double(x):\n",
        "def double(x):\n    import os\n    with open(os.path.join(os.path.dirname(__file__), 'big'), 'wb') as f:\n"
        "        for _ in range(64):\n            f.write(b'x' * (1 << 20))\n            f.flush()\n"
        "            os.fsync(f.fileno())\n    import time\n    time.sleep(2)\n",
    )
    drafter = replay(tmp_path, {"description": "fills the disk", "files": {"windows.py": filler}})
    [verdict] = verdicts(run_fix(repo, drafter, max_iterations=1))
    assert verdict["verdict"] == "rejected" and "disk cap" in verdict["reason"]


@needs_bwrap
def test_a_sandboxes_processes_share_one_memory_cap(tmp_path):
    from ralph.sandboxes.bwrap import BwrapSandbox, _cgroup_parent

    if _cgroup_parent("memory") is None:
        pytest.skip("no writable memory cgroup here: memory is capped per process only")
    box = BwrapSandbox(tmp_path, memory_total_bytes=300 << 20)
    # Two processes of 200 MiB each: either alone fits, both together do not.
    code = (
        "import os, time\nos.fork()\nx = bytearray(200 << 20)\n"
        "for i in range(0, len(x), 4096):\n    x[i] = 1\ntime.sleep(1)\nprint('survived', flush=True)\n"
    )
    result = box.run([sys.executable, "-c", code], cwd=str(tmp_path), timeout_s=60)
    assert result.output.count("survived") < 2
    assert "ok" in box.run([sys.executable, "-c", "print('ok')"], cwd=str(tmp_path), timeout_s=60).output


def test_a_sitecustomize_in_the_project_never_runs_in_the_type_checker(tmp_path):
    from ralph.validators.mypy import MypyValidator

    marker = tmp_path / "ran"
    project = tmp_path / "p"
    write_files(
        project,
        {
            "pyproject.toml": "[tool.mypy]\n",
            "m.py": "x: int = 1\n",
            "sitecustomize.py": f"open({str(marker)!r}, 'w').write('ran')\n",
        },
    )
    mypy = MypyValidator(Toolchain(sys.executable, LocalSandbox(), project))
    try:
        assert mypy.check(Scope(timeout_s=120)).error is None
    finally:
        mypy.close()
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "content"),
    [
        ("ruff.toml", 'extend = "/root/secret"\n'),
        ("sitecustomize.py", "import os\n"),
        ("pkg/evil.pth", "import os\n"),
        ("tox.ini", "[pytest]\naddopts = -p no:ralph_pytest_report\n"),
        ("pytest.toml", "[pytest]\n"),
        ("json.py", "loads = None\n"),
        ("src/pytest.py", "main = None\n"),
        ("_pytest/__init__.py", "\n"),
    ],
)
def test_a_candidate_that_adds_a_verification_config_file_is_refused(make_repo, tmp_path, path, content):
    repo = make_repo(BUGGY_WINDOWS)
    drafter = replay(tmp_path, {"description": "config", "files": {"windows.py": FIXED, path: content}})
    [verdict] = verdicts(run_fix(repo, drafter, max_iterations=1))
    assert verdict["failed_stage"] == "policy" and path in verdict["reason"]


@pytest.mark.parametrize(
    "args",
    [["fix", "--bogus"], ["fix", "--candidates", "many"], ["nosuchcommand"], ["report"]],
)
def test_every_usage_error_is_a_usage_message_and_exit_2(args):
    proc = run_ralph(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Usage:" in proc.stderr and "internal error" not in proc.stderr


def test_ralph_version_prints_the_version():
    proc = run_ralph("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("ralph ")


def test_a_candidate_that_silences_a_checker_is_refused(make_repo, tmp_path):
    repo = make_repo(BUGGY_WINDOWS)
    quiet = "import os  # noqa: F401\n" + FIXED
    drafter = replay(tmp_path, {"description": "noqa", "files": {"windows.py": quiet}})
    [verdict] = verdicts(run_fix(repo, drafter, max_iterations=1))
    assert verdict["failed_stage"] == "policy" and "noqa" in verdict["reason"]


# The gate beside the loop in both modes of --on-gate-failure, and across pytest-xdist workers: what it
# cannot vouch for is undone in each.
ON_GATE_FAILURE = pytest.mark.parametrize(
    ("on_gate_failure", "gate_workers"), [("rollback", 0), ("todo", 0), ("rollback", 2)]
)


@needs_bwrap
@ON_GATE_FAILURE
def test_a_candidate_that_crashes_python_m_pytest_is_rejected(
    make_repo, tmp_path, on_gate_failure, gate_workers
):
    """Every test process looks as `python -m pytest` does (its command line, its `__main__`), the
    gate's too, whatever worker it forks from: a candidate that kills such a process gives no
    verdict, whichever stage meets it first."""
    repo = make_repo(BUGGY_WINDOWS)
    two_faced = "import __main__\nimport os\nimport signal\nimport sys\n\n" + FIXED.replace(
        "def sliding_sums(xs, k):\n",
        "def sliding_sums(xs, k):\n"
        "    main = getattr(__main__, '__file__', None) or ''\n"
        "    if sys.argv[0].endswith('__main__.py') and main.endswith('pytest/__main__.py'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n",
    )
    drafter = replay(tmp_path, {"description": "two-faced", "files": {"windows.py": two_faced}})
    outcome = run_fix(
        repo,
        drafter,
        max_iterations=1,
        background_gate=True,
        on_gate_failure=on_gate_failure,
        gate_workers=gate_workers,
    )
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "rejected" and "no verdict" in verdict["reason"]
    assert outcome.branch is None


@pytest.mark.slow
@needs_bwrap
@ON_GATE_FAILURE
def test_a_candidate_right_only_when_some_tests_are_run_is_rejected(
    make_repo, tmp_path, on_gate_failure, gate_workers
):
    """Only a whole-suite run in a fresh process can accept: a candidate that is right in a warm
    fork, or whenever the command line names tests or -x, would fail in the user's `pytest`."""
    repo = make_repo(BUGGY_WINDOWS)
    two_faced = "import sys\n\n" + FIXED.replace(
        "def sliding_sums(xs, k):\n",
        "def sliding_sums(xs, k):\n"
        "    partial = any(a == '-x' or '::' in a or a.endswith('.py') for a in sys.argv[1:])\n"
        "    if sys.argv[0].endswith('__main__.py') and not partial:\n"
        "        return []\n",
    )
    drafter = replay(tmp_path, {"description": "argv-sniffing", "files": {"windows.py": two_faced}})
    outcome = run_fix(
        repo,
        drafter,
        max_iterations=1,
        background_gate=True,
        on_gate_failure=on_gate_failure,
        gate_workers=gate_workers,
    )
    [verdict] = verdicts(outcome)
    assert verdict["verdict"] == "rejected", verdict["reason"]
    assert outcome.branch is None


@pytest.mark.slow
@needs_bwrap
def test_a_candidate_that_breaks_a_passing_test_only_in_the_whole_suite_never_reaches_the_branch(
    make_repo, tmp_path
):
    """In todo mode such a state is kept, its code the loop's state: only a later state whose gate
    passed is committed, and what the branch holds is the gated state's files, none of the kept code."""
    repo = make_repo(BUGGY_WINDOWS)
    two_faced = "import sys\n\n" + FIXED.replace(
        "def double(x):\n",
        "def double(x):\n"
        "    if not any(a == '-x' or '::' in a or a.endswith('.py') for a in sys.argv[1:]):\n"
        "        return x * 3\n",
    )
    drafter = replay(
        tmp_path,
        {"description": "two-faced", "files": {"windows.py": two_faced}},
        {"description": "fix", "files": {"windows.py": FIXED}},
    )
    outcome = run_fix(repo, drafter, max_iterations=3, background_gate=True, on_gate_failure="todo")
    gates = [r for r in read_trace(outcome.trace) if r["type"] == "gate"]
    assert [(g["verdict"], g.get("kept")) for g in gates] == [("rejected", "todo"), ("passed", None)], gates
    assert "test_double" in gates[0]["reason"]
    assert outcome.result.outcome == "goal" and outcome.branch is not None
    assert git(repo, "show", f"{outcome.branch}:windows.py") == FIXED


def test_a_project_that_stops_at_its_first_failure_can_still_be_verified(tmp_path):
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-x"\n',
            "tests/test_a.py": "def test_one():\n    assert False\n\n\ndef test_two():\n    assert False\n",
        },
    )
    result = _pytest_stage(tmp_path)
    assert result.error is None and [t.outcome for t in result.tests] == ["failed"]


def test_a_ruff_version_pinned_by_pre_commit_that_is_not_the_one_used_is_said(make_repo, tmp_path):
    config = (
        "repos:\n  - repo: https://github.com/astral-sh/ruff-pre-commit\n    rev: v0.4.4\n"
        "    hooks:\n      - id: ruff\n"
    )
    repo = make_repo({**BUGGY_WINDOWS, ".pre-commit-config.yaml": config})
    drafter = replay(tmp_path, {"description": "fix", "files": {"windows.py": FIXED}})
    outcome = run_fix(repo, drafter, max_iterations=1)
    assert any("pins 0.4.4 in .pre-commit-config.yaml" in line for line in outcome.notices)


@needs_bwrap
def test_a_sandboxed_worker_started_from_a_short_lived_thread_survives_it(tmp_path):
    import threading

    from ralph.sandboxes.bwrap import BwrapSandbox
    from ralph.validators.pytest_run import PytestValidator
    from ralph.validators.warm import WarmRunner

    write_files(tmp_path / "p", {"tests/test_a.py": "def test_one():\n    pass\n"})
    project = tmp_path / "p"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    box = BwrapSandbox(project, writable=[scratch])
    toolchain = Toolchain(sys.executable, box, project, scratch=scratch)
    warm = WarmRunner(toolchain)
    stage = PytestValidator(toolchain, warm=warm)
    results = []
    try:
        worker = threading.Thread(target=lambda: results.append(stage.check(Scope(timeout_s=60))))
        worker.start()
        worker.join()  # the thread that started the sandbox is gone...
        time.sleep(0.5)
        results.append(stage.check(Scope(timeout_s=60)))  # ...and the worker is still there
    finally:
        warm.close()
        box.close()  # (its pids cgroups)
    assert [r.error for r in results] == [None, None] and warm.starts == 1


@pytest.mark.parametrize(
    ("record", "said"),
    [
        ("[1, 2]", "line 1: a record is a JSON object"),
        ('{"edits": [{"path": "windows.py", "search": "x"}]}', "line 1: `edits` is a list of objects"),
        ('{"description": "none"}', "line 1: a record has exactly one of"),
        ("{not json", "line 1: not JSON"),
    ],
)
def test_a_malformed_replay_record_is_bad_input(make_repo, tmp_path, record, said):
    repo = make_repo(BUGGY_WINDOWS)
    file = tmp_path / "edits.jsonl"
    file.write_text(record + "\n")
    proc = run_ralph("fix", str(repo), "--drafter", f"replay:{file}", "--no-sandbox")
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


def test_text_from_the_project_is_printed_as_text_never_markup_or_escapes():
    import io

    from rich.console import Console

    from ralph.view import RichView, summary_table

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=300)
    forged = "tests/t.py::[link=http://evil.example]x[/link] \x1b]8;;http://evil.example\x1b\\y\x1b]8;;\x1b\\"
    record = {
        "i": 1,
        "drafter": "mutation",
        "candidates": [{"verdict": "rejected", "reason": f"tests: breaks test {forged}"}],
        "accepted": False,
        "remaining_before": 1,
        "remaining_after": 1,
        "draft_ms": 0.0,
        "verify_ms": 1.0,
    }
    view = RichView(console)
    view.iteration(record)
    view.notice(forged)
    console.print(summary_table({"outcome": "stalled", "branch": "ralph/[bold]x[/bold]"}))
    text = out.getvalue()
    assert "[link=http://evil.example]x[/link]" in text and "ralph/[bold]x[/bold]" in text
    assert "\x1b]8;;http://evil" not in text  # no hyperlink escape reaches the terminal


def test_fix_help_shows_defaults_and_exit_codes_and_no_stray_metavars():
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "ralph", "fix", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "160"},
        check=False,
    )
    assert proc.returncode == 0
    assert "Exit codes: 0 goal reached" in proc.stdout and "(default 4)" in proc.stdout
    lines_with_bool = [line for line in proc.stdout.splitlines() if "<bool>" in line]
    assert all("--help" in line for line in lines_with_bool), lines_with_bool


def test_an_early_stop_forged_by_the_code_under_test_gives_no_verdict(tmp_path):
    """The plugin's flags live in the tested process: code that says "stopped at the first
    regression" and stops the run after a passing test, with no regression to show, must not leave
    the tests it kept from running at their earlier outcomes (a gate that vouches for them)."""
    from ralph.validators.pytest_run import PytestValidator

    write_files(
        tmp_path,
        {
            "tests/test_a.py": (
                "import importlib\n\n\ndef test_one():\n"
                "    m = importlib.import_module('ral' 'ph_pytest_report')\n"
                "    m._stopped, m._session.shouldstop = 'regression', 'x'\n\n\n"
                "def test_two():\n    assert False\n"
            ),
        },
    )
    stage = PytestValidator(Toolchain(sys.executable, LocalSandbox(), tmp_path))
    guard = {"tests/test_a.py::test_two"}
    result = stage.check(Scope(timeout_s=60), guard=guard)
    assert result.error is not None and "stopped early" in result.error
    # A real regression stop is kept: test_two fails while guarded, and the run stops there.
    write_files(
        tmp_path, {"tests/test_a.py": "def test_two():\n    assert False\n\n\ndef test_three():\n    pass\n"}
    )
    real = stage.check(Scope(timeout_s=60), guard=guard)
    assert real.error is None and real.stopped_early
    assert [t.nodeid for t in real.tests] == ["tests/test_a.py::test_two"]
